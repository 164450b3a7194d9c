// Package argocdhealth runs the Argo CD health checks macvirt ships in
// config/argocd the way Argo CD runs custom health checks, so tests can check
// them against fixtures and against objects the controllers wrote.
package argocdhealth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// Script returns the shipped health check, one script for every macvirt.io kind.
func Script() (string, error) {
	path := filepath.Join(cluster.RepoRoot(), "config", "argocd", "health.lua")
	b, err := os.ReadFile(path) //nolint:gosec // the repository's own scripts.
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// toLua converts a decoded JSON value into the Lua value Argo CD gives a
// script: objects and arrays become tables, numbers stay numbers.
func toLua(l *lua.LState, v any) (lua.LValue, error) {
	switch v := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(v), nil
	case float64:
		return lua.LNumber(v), nil
	case string:
		return lua.LString(v), nil
	case []any:
		tbl := l.CreateTable(len(v), 0)
		for _, item := range v {
			lv, err := toLua(l, item)
			if err != nil {
				return nil, err
			}
			tbl.Append(lv)
		}
		return tbl, nil
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			lv, err := toLua(l, item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			tbl.RawSetString(key, lv)
		}
		return tbl, nil
	}
	return nil, fmt.Errorf("no Lua value for %T", v)
}

// Run runs script as Argo CD runs a custom health check: only the
// package, base and table libraries, a one-second limit, the object in the
// global obj, and a table with status and message as the result.
func Run(script string, obj map[string]any) (status, message string, err error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	value, err := toLua(l, obj)
	if err != nil {
		return "", "", err
	}
	l.SetGlobal("obj", value)
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	result, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("script returned %s, not a table", l.Get(-1).Type())
	}
	s, ok := result.RawGetString("status").(lua.LString)
	if !ok {
		return "", "", fmt.Errorf("status is %s, not a string", result.RawGetString("status").Type())
	}
	switch m := result.RawGetString("message").(type) {
	case lua.LString:
		message = string(m)
	case *lua.LNilType:
	default:
		return "", "", fmt.Errorf("message is %s, not a string", m.Type())
	}
	return string(s), message, nil
}

package kubectlmac

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	flag "github.com/spf13/pflag"

	"golang.org/x/crypto/ssh"
)

type cpCmd struct{ login sshLogin }

func cpFlags(fs *flag.FlagSet) runner {
	c := &cpCmd{}
	c.login.register(fs)
	return c
}

// macPath is one side of cp: NAME:PATH on a claim's Mac, or a local path
// (- for standard input or output).
type macPath struct {
	claim, path string
}

// parseMacPath reads NAME:PATH as the Mac's side. A local path with a colon
// is written with a directory (./a:b), as for kubectl cp.
func parseMacPath(arg string) macPath {
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") {
		return macPath{path: arg}
	}
	if name, path, ok := strings.Cut(arg, ":"); ok && name != "" && !strings.Contains(name, "/") {
		return macPath{claim: name, path: path}
	}
	return macPath{path: arg}
}

func (c *cpCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	if len(args) != 2 {
		return 2, errors.New("give a source and a destination, one of them NAME:PATH: kubectl mac cp FILE NAME:PATH, or kubectl mac cp NAME:PATH FILE")
	}
	src, dst := parseMacPath(args[0]), parseMacPath(args[1])
	switch {
	case src.claim != "" && dst.claim != "":
		return 2, errors.New("both sides are on a Mac: copy to your machine first")
	case src.claim == "" && dst.claim == "":
		return 2, errors.New("neither side is on a Mac: write one as NAME:PATH")
	}
	remote := src
	if dst.claim != "" {
		remote = dst
	}
	if remote.path == "" {
		return 2, fmt.Errorf("%s: give the file's path on the Mac after the colon (relative to the user's home, or absolute)", remote.claim+":")
	}
	cl, err := c.login.dial(ctx, env, remote.claim)
	if err != nil {
		return 1, err
	}
	defer func() { _ = cl.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = cl.Close() })
	defer stop()
	if dst.claim != "" {
		return upload(cl, env, src.path, dst)
	}
	return download(cl, env, src, dst.path)
}

// upload copies local (a file, or - for standard input) to the Mac with
// cat, as scp's legacy protocol does with a shell on the other side.
func upload(cl *ssh.Client, env *Env, local string, to macPath) (int, error) {
	in := env.In
	if local != "-" {
		f, err := os.Open(local) //nolint:gosec // the user's own file.
		if err != nil {
			return 1, err
		}
		defer func() { _ = f.Close() }()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return 1, fmt.Errorf("%s is a directory; cp copies files (for a directory: tar -cf - DIR | kubectl mac ssh %s -- tar -xf -)", local, to.claim)
		}
		in = f
	}
	session, stderr, err := catSession(cl)
	if err != nil {
		return 1, err
	}
	defer func() { _ = session.Close() }()
	w, err := session.StdinPipe()
	if err != nil {
		return 1, err
	}
	if err := session.Start("cat > " + shellQuote(to.path)); err != nil {
		return 1, err
	}
	_, copyErr := io.Copy(w, in)
	_ = w.Close()
	if err := session.Wait(); err != nil {
		return 1, remoteError(to, err, stderr)
	}
	if copyErr != nil {
		return 1, fmt.Errorf("reading %s: %w", local, copyErr)
	}
	return 0, nil
}

// download copies the Mac's file to local (a file, a directory to put it
// in, or - for standard output). A file it fails to fetch is not left
// behind half-written.
func download(cl *ssh.Client, env *Env, from macPath, local string) (int, error) {
	session, stderr, err := catSession(cl)
	if err != nil {
		return 1, err
	}
	defer func() { _ = session.Close() }()
	if local == "-" {
		session.Stdout = env.Out
		if err := session.Run("cat " + shellQuote(from.path)); err != nil {
			return 1, remoteError(from, err, stderr)
		}
		return 0, nil
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, filepath.Base(from.path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".kubectl-mac-*")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	session.Stdout = tmp
	runErr := session.Run("cat " + shellQuote(from.path))
	if err := tmp.Close(); runErr == nil && err != nil {
		return 1, err
	}
	if runErr != nil {
		return 1, remoteError(from, runErr, stderr)
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return 1, err
	}
	return 0, nil
}

// catSession is a session for cat, whose standard error is kept for
// remoteError.
func catSession(cl *ssh.Client) (*ssh.Session, *bytes.Buffer, error) {
	session, err := cl.NewSession()
	if err != nil {
		return nil, nil, err
	}
	stderr := &bytes.Buffer{}
	session.Stderr = stderr
	return session, stderr, nil
}

// remoteError says what went wrong on the Mac, in its own words.
func remoteError(p macPath, err error, stderr *bytes.Buffer) error {
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%s:%s: %s", p.claim, p.path, msg)
		}
		return fmt.Errorf("%s:%s: exit status %d", p.claim, p.path, exit.ExitStatus())
	}
	return err
}

// shellQuote quotes s as one word for the Mac's shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

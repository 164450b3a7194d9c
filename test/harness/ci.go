package harness

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// The CI agents a simulated guest runs are the world's own binary (a
// suite's test binary, the sandbox's command), started by a script in the
// guest's golden image with a role as its first argument. PlayGuestRole, at
// the top of a suite's TestMain and of the sandbox's main, plays it.
const (
	// GitHubRunnerRole plays GitHub's runner (run.sh --jitconfig ...)
	// against the fake GitHub.
	GitHubRunnerRole = "macvirt-fake-github-runner"
	// BuildkiteAgentRole plays buildkite-agent (start --acquire-job ...)
	// against the fake Buildkite.
	BuildkiteAgentRole = "macvirt-fake-buildkite-agent"
)

// BuildkiteAgentPath is where the golden image keeps buildkite-agent, under
// the guest account's home: the path a queue's spec.agent.path names.
const BuildkiteAgentPath = "bin/buildkite-agent"

// guestHome is the guest account's home on a simulated guest's disk.
const guestHome = "Users/admin/"

// PlayGuestRole plays the role this process's first argument names, until
// it is done or SIGINT or SIGTERM, and returns its exit code; played is
// false, and nothing happens, when the argument names none.
func PlayGuestRole() (code int, played bool) {
	if len(os.Args) < 2 {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case GitHubRunnerRole:
		return fakegithub.RunnerMain(ctx, os.Args[2:], os.Stdout, os.Stderr), true
	case BuildkiteAgentRole:
		return fakebuildkite.AgentMain(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr), true
	}
	return 0, false
}

// BuildkiteOptions say what the world's fake Buildkite accepts.
type BuildkiteOptions struct {
	// Token is the cluster agent token it accepts, Queue its queue's key.
	Token string
	Queue string
}

// ciGuestFiles put the CI agents of the world's fakes into every guest's
// golden image: GitHub's runner as run.sh in the default runner directory,
// buildkite-agent at BuildkiteAgentPath, each a script that execs command
// in its role.
func ciGuestFiles(command string, github, buildkite bool) map[string]simulator.GuestFile {
	files := map[string]simulator.GuestFile{}
	script := func(what, role string) simulator.GuestFile {
		return simulator.GuestFile{Mode: 0o755, Content: fmt.Appendf(nil, "#!/bin/sh\n# %s, played by the world's own binary.\nexec '%s' %s \"$@\"\n",
			what, command, role)}
	}
	if github {
		files[guestHome+macvirtv1alpha1.DefaultRunnerDirectory+"/run.sh"] = script("GitHub's runner", GitHubRunnerRole)
	}
	if buildkite {
		files[guestHome+BuildkiteAgentPath] = script("buildkite-agent", BuildkiteAgentRole)
	}
	return files
}

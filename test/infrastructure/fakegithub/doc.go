// Package fakegithub is a fake GitHub for tests and the sandbox: an
// httptest server that answers the requests GitHub's own Go clients send
// when macvirt talks to GitHub Actions, in the shapes those clients parse.
//
// It serves three clients against one address. The scale-set client
// (github.com/actions/scaleset) is given "<URL>/<org>" or
// "<URL>/<org>/<repo>" as its configuration address; it takes the host for
// a GitHub Enterprise Server and so asks the REST API under "/api/v3". The
// REST client (go-github) is pointed at "<URL>/api/v3/" with
// WithEnterpriseURLs, and ghinstallation's Transport at "<URL>/api/v3".
//
// Behind the endpoints sits a small model of GitHub Actions: scale sets,
// their message sessions and queues, jobs that tests queue with QueueJob,
// and ephemeral runners registered with just-in-time configurations. A
// runner is played by RunRunner, which stands in for the actions runner's
// "run.sh --jitconfig": it connects to the fake, takes one job, reports
// its end and returns.
//
// The Endpoint constants name every route; Requests counts the calls per
// route, so a test can assert which were made.
package fakegithub

// Route names as counted by (*Server).Requests: the method and the path
// pattern, with placeholders in braces.
const (
	// EndpointAccessToken creates a GitHub App installation access token.
	EndpointAccessToken = "POST /api/v3/app/installations/{id}/access_tokens" //nolint:gosec // a route, not a credential.
	// EndpointOrgRegistrationToken creates an organisation's runner
	// registration token.
	EndpointOrgRegistrationToken = "POST /api/v3/orgs/{org}/actions/runners/registration-token" //nolint:gosec // a route, not a credential.
	// EndpointRepoRegistrationToken creates a repository's runner
	// registration token.
	EndpointRepoRegistrationToken = "POST /api/v3/repos/{owner}/{repo}/actions/runners/registration-token" //nolint:gosec // a route, not a credential.
	// EndpointRunnerRegistration trades a registration token for the
	// Actions service's address and an admin token.
	EndpointRunnerRegistration = "POST /api/v3/actions/runner-registration"
	// EndpointOrgRunners lists an organisation's self-hosted runners.
	EndpointOrgRunners = "GET /api/v3/orgs/{org}/actions/runners"
	// EndpointRepoRunners lists a repository's self-hosted runners.
	EndpointRepoRunners = "GET /api/v3/repos/{owner}/{repo}/actions/runners"
	// EndpointOrgRunner gets one of an organisation's runners.
	EndpointOrgRunner = "GET /api/v3/orgs/{org}/actions/runners/{id}"
	// EndpointRepoRunner gets one of a repository's runners.
	EndpointRepoRunner = "GET /api/v3/repos/{owner}/{repo}/actions/runners/{id}"
	// EndpointDeleteOrgRunner removes one of an organisation's runners.
	EndpointDeleteOrgRunner = "DELETE /api/v3/orgs/{org}/actions/runners/{id}"
	// EndpointDeleteRepoRunner removes one of a repository's runners.
	EndpointDeleteRepoRunner = "DELETE /api/v3/repos/{owner}/{repo}/actions/runners/{id}"

	// EndpointRunnerGroups looks runner groups up by name.
	EndpointRunnerGroups = "GET /_actions/_apis/runtime/runnergroups/{$}"
	// EndpointListScaleSets looks scale sets up by runner group and name.
	EndpointListScaleSets = "GET /_actions/_apis/runtime/runnerscalesets"
	// EndpointCreateScaleSet creates a scale set.
	EndpointCreateScaleSet = "POST /_actions/_apis/runtime/runnerscalesets"
	// EndpointGetScaleSet gets a scale set by id.
	EndpointGetScaleSet = "GET /_actions/_apis/runtime/runnerscalesets/{id}"
	// EndpointUpdateScaleSet updates a scale set.
	EndpointUpdateScaleSet = "PATCH /_actions/_apis/runtime/runnerscalesets/{id}"
	// EndpointDeleteScaleSet deletes a scale set.
	EndpointDeleteScaleSet = "DELETE /_actions/_apis/runtime/runnerscalesets/{id}"
	// EndpointCreateSession opens a scale set's message session.
	EndpointCreateSession = "POST /_actions/_apis/runtime/runnerscalesets/{id}/sessions"
	// EndpointRefreshSession refreshes a message session's queue token.
	EndpointRefreshSession = "PATCH /_actions/_apis/runtime/runnerscalesets/{id}/sessions/{sid}"
	// EndpointDeleteSession closes a message session.
	EndpointDeleteSession = "DELETE /_actions/_apis/runtime/runnerscalesets/{id}/sessions/{sid}"
	// EndpointAcquireJobs acquires offered jobs for a scale set.
	EndpointAcquireJobs = "POST /_actions/_apis/runtime/runnerscalesets/{id}/acquirejobs"
	// EndpointGenerateJITConfig registers a runner and returns its
	// just-in-time configuration.
	EndpointGenerateJITConfig = "POST /_actions/_apis/runtime/runnerscalesets/{id}/generatejitconfig"
	// EndpointGetAgent gets a runner by id from the Actions service.
	EndpointGetAgent = "GET /_actions/_apis/distributedtask/pools/{pool}/agents/{id}"
	// EndpointListAgents looks runners up by name in the Actions service.
	EndpointListAgents = "GET /_actions/_apis/distributedtask/pools/{pool}/agents"
	// EndpointDeleteAgent removes a runner through the Actions service.
	EndpointDeleteAgent = "DELETE /_actions/_apis/distributedtask/pools/{pool}/agents/{id}"

	// EndpointGetMessage long-polls a session's message queue.
	EndpointGetMessage = "GET /_queue/{sid}"
	// EndpointDeleteMessage acknowledges a message.
	EndpointDeleteMessage = "DELETE /_queue/{sid}/{mid}"

	// EndpointRunnerListen is the fake runner's connection: it holds while
	// the runner is online and streams the runner's events.
	EndpointRunnerListen = "GET /_fake/runners/{id}/listen"
	// EndpointQueueJob queues a job (the fake's own, for the sandbox).
	EndpointQueueJob = "POST /_fake/jobs"
	// EndpointListJobs lists every job (the fake's own, for the sandbox).
	EndpointListJobs = "GET /_fake/jobs"

	// EndpointUnknown counts requests that matched no route.
	EndpointUnknown = "unknown"
)

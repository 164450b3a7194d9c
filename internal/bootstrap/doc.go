// Package bootstrap decides, once for the claim controller and the
// guest-agent endpoint alike, what a binding's bootstrap is and where it
// stands: which parts run (Plan: the class's, then the claim's, fixed when
// the claim is bound), what each part's state is from the agent's reports
// (Observe), what the claim's BootstrapSucceeded condition says and whether
// Ready waits (Summarize), and which part the agent is handed next
// (Next). Task turns a part into the protocol's task, reading the
// Secrets and ConfigMaps it names with uncached GETs in the claim's
// namespace. Everything but Task is pure.
package bootstrap

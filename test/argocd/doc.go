// Package argocd checks the Argo CD health checks in config/argocd: each
// Lua script is run the way Argo CD runs it, against the fixtures in
// testdata, and the kustomize component that ships them is built.
package argocd

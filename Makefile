# macvirt: macOS virtual machines as a service on KubeVirt and CDI.
# `make help` lists the targets.

# Versions and image names live here and nowhere else.
VERSION ?= 0.1.0
IMAGE_REGISTRY ?= ghcr.io/macvirt
IMG ?= $(IMAGE_REGISTRY)/macvirt-manager:v$(VERSION)
HOOK_IMG ?= $(IMAGE_REGISTRY)/macvirt-domain-hook:v$(VERSION)
# KUBEVIRT_VERSION is the KubeVirt release macvirt builds against (go.mod's
# kubevirt.io/api); the hook image is based on its sidecar-shim.
KUBEVIRT_VERSION ?= v1.9.0
# KUBEVIRT_HOOK_VERSIONS are the KubeVirt releases whose sidecar-shim a
# release builds a hook image on, one per supported minor: HOOK_IMG for
# KUBEVIRT_VERSION's minor, HOOK_IMG-kubevirt<minor> for the others (the
# operator picks by the cluster's KubeVirt: internal/domainhook/install/image.go,
# whose KubeVirtMinors a test holds to this list).
KUBEVIRT_HOOK_VERSIONS ?= v1.7.0 v1.8.0 $(KUBEVIRT_VERSION)
kubevirt-minor = $(word 1,$(subst ., ,$(1:v%=%))).$(word 2,$(subst ., ,$(1:v%=%)))
# HOOK_IMAGES_BY_KUBEVIRT is <minor>=<image> for each minor other than
# KUBEVIRT_VERSION's; a release sets it to the pushed images' digests.
HOOK_OTHER_VERSIONS = $(filter-out $(KUBEVIRT_VERSION),$(KUBEVIRT_HOOK_VERSIONS))
hook-image-for = $(HOOK_IMG)-kubevirt$(call kubevirt-minor,$(1))
HOOK_IMAGES_BY_KUBEVIRT ?= $(strip $(foreach v,$(HOOK_OTHER_VERSIONS),$(call kubevirt-minor,$(v))=$(call hook-image-for,$(v))))
# The manager defaults --hook-image to HOOK_IMG. (Not LDFLAGS: that one is
# often exported with C linker flags.)
GO_LDFLAGS ?= -X github.com/macvirt/macvirt/internal/domainhook/install.DefaultImage=$(HOOK_IMG)
# KUBERNETES_VERSION is the version of the envtest binaries built by hack/envtest.
KUBERNETES_VERSION ?= v1.37.2
# YEAR is written into generated file headers; fixed so regeneration is stable.
YEAR ?= 2026

CONTAINER_TOOL ?= docker

# Tools are installed into LOCALBIN; envtest's binaries into ENVTEST_DIR.
# Defined before any rule names them as prerequisites.
LOCALBIN ?= $(shell pwd)/bin
ENVTEST_DIR ?= $(LOCALBIN)/envtest

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

# The packages that carry kubebuilder markers. Not "./...": controller-gen
# would walk into the helper modules under hack/ and load their (large, and
# partly unserved) dependency graphs.
MANIFEST_PATHS ?= ./api/...;./internal/...

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, the ClusterRole and webhook configurations from the markers.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd webhook paths="$(MANIFEST_PATHS)" output:crd:artifacts:config=config/crd/bases
	cp config/prometheus/monitor.yaml config/prometheus/rules.yaml internal/monitoring/

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt",year=$(YEAR) paths="./api/..."

.PHONY: crds
crds: controller-gen ## Regenerate the KubeVirt and CDI CRDs in test/crds (hack/crdgen).
	CONTROLLER_GEN="$(CONTROLLER_GEN)" hack/crdgen/generate.sh

.PHONY: domain-fixtures
domain-fixtures: ## Regenerate the domain hook's KubeVirt domain XML fixtures from the render goldens (hack/kubevirt/domainxml; make golden does this too).
	hack/kubevirt/domainxml/generate.sh

.PHONY: golden
golden: ## Rewrite the render goldens, the domain XML made from them, the domain-hook goldens, the Plugin transports' domains and the Argo CD checks' upstream layout (review the diff!).
	go test ./internal/render/ -run '^TestGoldenRenderings$$' -update
	hack/kubevirt/domainxml/generate.sh
	go test ./internal/domainhook/hook/ -run '^(TestGoldenDomains|TestPluginVariantsFile)$$' -update
	go test ./internal/domainhook/install/ -run '^TestShippedManifests$$' -update
	go test ./test/argocd/ -run '^TestUpstreamLayoutIsCurrent$$' -update
	hack/kubevirt/domainxml/generate.sh plugins

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: test
test: manifests generate fmt vet envtest kubevirt kustomize ## Run every test layer: unit, golden, envtest integration, bundle, Helm chart and GitOps checks.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test ./... -count=1 -timeout 20m -coverprofile cover.out
	cd hack/helmcheck && go test ./... -count=1

.PHONY: test-unit
test-unit: kustomize ## Run the unit tests alone: no API server, libvirt or QEMU (go test -short; make test runs those too).
	go test -short ./... -count=1

# FUZZTIME is how long `make fuzz` runs each target; `make test` runs
# only their seed corpora.
FUZZTIME ?= 30s
FUZZ_TARGETS ?= ./internal/webhook/v1alpha1:FuzzMacClass ./internal/webhook/v1alpha1:FuzzMacPool \
	./internal/webhook/v1alpha1:FuzzMacClaim ./internal/webhook/v1alpha1:FuzzMacMachine \
	./internal/domainhook/hook:FuzzApply ./internal/guestendpoint:FuzzDecodeHeartbeat

.PHONY: fuzz
fuzz: ## Fuzz every target for FUZZTIME each (default 30s).
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzzing $$fn in $$pkg for $(FUZZTIME)"; \
		go test "$$pkg" -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	"$(GOLANGCI_LINT)" run ./...

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply its fixes.
	"$(GOLANGCI_LINT)" run --fix ./...

.PHONY: verify-gen
verify-gen: manifests generate crds golden bundle helm-chart ## Regenerate everything (the OLM bundle and the Helm chart too) and fail if anything differs from git.
	go mod tidy
	cd hack/helmcheck && go mod tidy
	cd hack/envtest && go mod tidy
	cd hack/crdgen && go mod tidy
	cd hack/kubevirt && go mod tidy
	@if [ -n "$$(git status --porcelain --untracked-files=all -- . ':!bin' ':!cover.out')" ]; then \
		echo "Generated files are out of date; run 'make verify-gen' and commit the result:"; \
		git status --porcelain --untracked-files=all -- . ':!bin' ':!cover.out'; \
		git --no-pager diff --stat; \
		exit 1; \
	fi

# Every Go module of the repository that is built on its own; verify-modules
# checks each. (The stand-ins under hack/kubevirt/stubs are parts of
# hack/kubevirt's build, not modules of their own.)
GO_MODULE_DIRS = $(filter-out hack/kubevirt/stubs/%,$(patsubst %/,%,$(dir $(shell git ls-files -- go.mod '*/go.mod'))))

.PHONY: verify-modules
verify-modules: ## Fetch every module each go.mod needs into an empty module cache, as a new machine would; fails on one the proxy refuses.
	@cache="$$(mktemp -d)"; trap 'GOMODCACHE="$$cache" go clean -modcache; rm -rf "$$cache"' EXIT; \
	for dir in $(GO_MODULE_DIRS); do \
		echo "$$dir: go mod download, go mod verify, go list -deps -test ./... (GOMODCACHE=$$cache)"; \
		(cd "$$dir" && export GOMODCACHE="$$cache" && go mod download && go mod verify >/dev/null && go list -deps -test ./... >/dev/null) || exit 1; \
	done; \
	echo "every module of $(words $(GO_MODULE_DIRS)) go.mod files resolved: $$(du -sh "$$cache" | cut -f1) downloaded"

# BENCH_ARGS are passed to the bench, e.g. BENCH_ARGS="-n 1000 -profile-dir bin/profiles".
BENCH_ARGS ?=

.PHONY: bench
bench: envtest kubevirt $(ENVTEST_DIR)/kube-controller-manager ## Benchmark claim binding against Kubernetes' PV binder, claims on a suspended pool of fake Apple-silicon Macs, and memory (prints figures).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go run ./test/bench -kube-controller-manager "$(ENVTEST_DIR)/kube-controller-manager" $(BENCH_ARGS)

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	go build -ldflags "$(GO_LDFLAGS)" -o bin/manager ./cmd

.PHONY: build-agent
build-agent: ## Cross-compile the macOS guest agent (no cgo) into bin/macvirt-agent (darwin/amd64, KubeVirt's Intel guests) and bin/macvirt-agent-arm64 (darwin/arm64, Apple-silicon guests).
	GOOS=darwin GOARCH=amd64 CGO_ENABLED=0 go build -o bin/macvirt-agent ./cmd/macvirt-agent
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build -o bin/macvirt-agent-arm64 ./cmd/macvirt-agent

.PHONY: agent-pkg
agent-pkg: build-agent ## Build the agent's unsigned macOS installer package bin/macvirt-agent-<VERSION>.pkg, without a Mac (time stamps: SOURCE_DATE_EPOCH, else 0).
	go run ./hack/agentpkg -agent bin/macvirt-agent -launch-daemon cmd/macvirt-agent/io.macvirt.agent.plist \
		-identifier io.macvirt.agent -version $(VERSION) -out bin/macvirt-agent-$(VERSION).pkg

.PHONY: kubectl-mac
kubectl-mac: ## Build the kubectl mac plugin into bin/kubectl-mac (put bin/ on PATH, then: kubectl mac --help).
	go build -o bin/kubectl-mac ./cmd/kubectl-mac

.PHONY: fleeting-plugin
fleeting-plugin: ## Build GitLab Runner's fleeting plugin into bin/fleeting-plugin-macvirt (docs/gitlab.md).
	go build -ldflags="-X github.com/macvirt/macvirt/internal/gitlab.Version=v$(VERSION)" -o bin/fleeting-plugin-macvirt ./cmd/fleeting-plugin-macvirt

.PHONY: host-agent
host-agent: ## Build the host agent for Apple-silicon Macs into bin/macvirt-host-agent (darwin/arm64, no cgo; docs/apple-silicon-hosts.md).
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 go build -ldflags="-X main.version=v$(VERSION)" -o bin/macvirt-host-agent ./cmd/macvirt-host-agent

KUBECTL_MAC_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: kubectl-mac-dist
kubectl-mac-dist: ## Build the kubectl mac plugin for each of KUBECTL_MAC_PLATFORMS into dist/kubectl-mac, with SHA-256 sums (what a release ships).
	rm -rf dist/kubectl-mac && mkdir -p dist/kubectl-mac
	for p in $(KUBECTL_MAC_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/macvirt/macvirt/internal/kubectlmac.Version=v$(VERSION)" -o dist/kubectl-mac/kubectl-mac_$${os}_$${arch}/kubectl-mac ./cmd/kubectl-mac || exit 1; \
		tar -C dist/kubectl-mac/kubectl-mac_$${os}_$${arch} -czf dist/kubectl-mac/kubectl-mac_v$(VERSION)_$${os}_$${arch}.tar.gz kubectl-mac || exit 1; \
	done
	cd dist/kubectl-mac && sha256sum *.tar.gz > kubectl-mac_v$(VERSION)_SHA256SUMS

# SANDBOX_ARGS are passed to macvirt-sandbox, e.g. SANDBOX_ARGS="--until-ready --speed 4".
SANDBOX_ARGS ?=

.PHONY: sandbox
sandbox: envtest kubevirt ## Run all of macvirt on this machine (API server, KubeVirt's virt-api and virt-controller, operator, webhooks, simulated nodes, CDI and macOS) with the samples.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go run ./cmd/macvirt-sandbox $(SANDBOX_ARGS)

.PHONY: run
run: manifests generate fmt vet ## Run the operator against the current kubeconfig, serving its admission webhooks locally.
	go run ./cmd --hook-image=$(HOOK_IMG) --local-webhooks --zap-devel

.PHONY: docker-build
docker-build: ## Build the manager image and a domain-hook image per KUBEVIRT_HOOK_VERSIONS (needs a container engine).
	$(CONTAINER_TOOL) build --build-arg HOOK_IMG=$(HOOK_IMG) -t $(IMG) .
	$(CONTAINER_TOOL) build --build-arg SIDECAR_SHIM_IMAGE=quay.io/kubevirt/sidecar-shim:$(KUBEVIRT_VERSION) -f Dockerfile.hook -t $(HOOK_IMG) .
	$(foreach v,$(HOOK_OTHER_VERSIONS),$(CONTAINER_TOOL) build --build-arg SIDECAR_SHIM_IMAGE=quay.io/kubevirt/sidecar-shim:$(v) \
		-f Dockerfile.hook -t $(call hook-image-for,$(v)) . &&) true

# PLATFORMS are the platforms of the released images; the CSV's
# operatorframework.io/arch labels say the same (a test holds them to it).
PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: docker-buildx
docker-buildx: ## Build and push the manager and every hook image for PLATFORMS, writing each image's digest to dist/digests (a release does this; needs docker buildx).
	mkdir -p dist
	$(CONTAINER_TOOL) buildx build --platform $(PLATFORMS) --provenance=false --build-arg HOOK_IMG=$(HOOK_IMG) --push --metadata-file dist/manager.json -t $(IMG) .
	$(CONTAINER_TOOL) buildx build --platform $(PLATFORMS) --provenance=false --build-arg SIDECAR_SHIM_IMAGE=quay.io/kubevirt/sidecar-shim:$(KUBEVIRT_VERSION) \
		--push --metadata-file dist/hook.json -f Dockerfile.hook -t $(HOOK_IMG) .
	$(foreach v,$(HOOK_OTHER_VERSIONS),$(CONTAINER_TOOL) buildx build --platform $(PLATFORMS) --provenance=false \
		--build-arg SIDECAR_SHIM_IMAGE=quay.io/kubevirt/sidecar-shim:$(v) --push \
		--metadata-file dist/hook-kubevirt$(call kubevirt-minor,$(v)).json -f Dockerfile.hook -t $(call hook-image-for,$(v)) . &&) true
	$(MAKE) --no-print-directory digests

.PHONY: digests
digests: ## Write dist/digests, "<name> <digest>" of each buildx metadata file dist/<name>.json.
	for f in dist/*.json; do \
		printf '%s %s\n' "$$(basename "$$f" .json)" "$$(sed -n 's/.*"containerimage.digest": *"\([^"]*\)".*/\1/p' "$$f")"; \
	done > dist/digests
	cat dist/digests

.PHONY: docker-push
docker-push: ## Push the manager and domain-hook images.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(HOOK_IMG)
	$(foreach v,$(HOOK_OTHER_VERSIONS),$(CONTAINER_TOOL) push $(call hook-image-for,$(v)) &&) true

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install the CRDs into the cluster of the current kubeconfig.
	"$(KUSTOMIZE)" build config/crd | "$(KUBECTL)" apply -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall the CRDs (deletes every macvirt object; machines are stopped first only while the operator runs).
	"$(KUSTOMIZE)" build config/crd | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator to the cluster of the current kubeconfig.
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=${IMG}
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" apply -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator AND its CRDs (deletes every macvirt object; empty them first: docs/install.md).
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

##@ OLM bundle

# The bundle's package and channels.
BUNDLE_PACKAGE ?= macvirt
BUNDLE_CHANNELS ?= alpha
BUNDLE_DEFAULT_CHANNEL ?= alpha
BUNDLE_IMG ?= $(IMAGE_REGISTRY)/macvirt-bundle:v$(VERSION)
# The release this bundle replaces in its channel (a CSV name such as
# macvirt.v0.1.0; none for the first), and the older releases OLM may
# upgrade from directly (olm.skipRange): every one before this.
BUNDLE_REPLACES ?=
BUNDLE_SKIP_RANGE ?= <$(VERSION)
CATALOG_IMG ?= $(IMAGE_REGISTRY)/macvirt-catalog:v$(VERSION)

.PHONY: bundle
bundle: manifests kustomize ## Generate the OLM bundle (bundle/, bundle.Dockerfile) from config/manifests.
	"$(KUSTOMIZE)" build config/manifests | go run ./hack/bundlegen --version $(VERSION) --image $(IMG) \
		--hook-image $(HOOK_IMG) --hook-images-by-kubevirt "$(HOOK_IMAGES_BY_KUBEVIRT)" \
		--package $(BUNDLE_PACKAGE) --channels $(BUNDLE_CHANNELS) --default-channel $(BUNDLE_DEFAULT_CHANNEL) \
		--replaces "$(BUNDLE_REPLACES)" --skip-range "$(BUNDLE_SKIP_RANGE)"

.PHONY: upgrade-baseline
upgrade-baseline: manifests kustomize ## Freeze this release's CRDs into test/upgrade/testdata/v$(VERSION) (run once, when the release is cut); the upgrade test starts from the newest.
	mkdir -p test/upgrade/testdata/v$(VERSION)
	"$(KUSTOMIZE)" build config/crd > test/upgrade/testdata/v$(VERSION)/crds.yaml

# KUBEBUILDER_VERSION is the Kubebuilder whose helm/v2-alpha plugin writes
# dist/chart (`go run`, so nothing is installed).
KUBEBUILDER_VERSION ?= v4.16.0

# The chart is made from config/default with its network-policy option
# turned on (in a copy of config), so the plugin templates the chart's
# NetworkPolicies from config/network-policy instead of writing defaults of
# its own; hack/helmcheck turns them off by default again, as config/default
# has them.
.PHONY: helm-chart
helm-chart: manifests kustomize ## Generate the Helm chart dist/chart from config/default (with its network-policy and prometheus options) with Kubebuilder's helm/v2-alpha plugin, completed by hack/helmcheck (which checks it).
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	cp PROJECT "$$tmp/" && mkdir "$$tmp/src" && cp -R config "$$tmp/src/config" && \
	sed -i -e 's|^#- \.\./network-policy$$|- ../network-policy|' -e 's|^#components:$$|components:|' -e 's|^#- \.\./prometheus$$|- ../prometheus|' \
		"$$tmp/src/config/default/kustomization.yaml" && \
	for on in '- ../network-policy' 'components:' '- ../prometheus'; do \
		grep -qx -e "$$on" "$$tmp/src/config/default/kustomization.yaml" || \
			{ echo "helm-chart: config/default/kustomization.yaml has no '#$$on' line to turn on" >&2; exit 1; }; \
	done && \
	"$(KUSTOMIZE)" build "$$tmp/src/config/default" > "$$tmp/install.yaml" && \
	(cd "$$tmp" && go run sigs.k8s.io/kubebuilder/v4@$(KUBEBUILDER_VERSION) edit --plugins=helm/v2-alpha \
		--manifests install.yaml --output-dir out --force) && \
	rm -rf dist/chart && mkdir -p dist && cp -R "$$tmp/out/chart" dist/chart && \
	sed -i -e 's/^version: .*/version: $(VERSION)/' -e 's/^appVersion: .*/appVersion: "v$(VERSION)"/' dist/chart/Chart.yaml && \
	cd hack/helmcheck && go run ./complete --chart ../../dist/chart --manifests "$$tmp/install.yaml"

.PHONY: bundle-build
bundle-build: bundle ## Build the bundle image (needs a container engine).
	$(CONTAINER_TOOL) build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

# OPM is operator-registry's opm; a release installs it (it is not a Go
# module the proxy serves here).
OPM ?= opm

.PHONY: catalog
catalog: ## Render a file-based catalog of BUNDLE_IMG (by digest in a release) into dist/catalog with opm, validate it, and write dist/catalog.Dockerfile (needs opm).
	rm -rf dist/catalog dist/catalog.Dockerfile && mkdir -p dist/catalog
	go run ./hack/bundlegen --catalog-template dist/catalog-template.yaml --bundle-image $(BUNDLE_IMG) --version $(VERSION) \
		--package $(BUNDLE_PACKAGE) --channels $(BUNDLE_CHANNELS) --default-channel $(BUNDLE_DEFAULT_CHANNEL) \
		--replaces "$(BUNDLE_REPLACES)" --skip-range "$(BUNDLE_SKIP_RANGE)"
	"$(OPM)" alpha render-template basic -o yaml dist/catalog-template.yaml > dist/catalog/catalog.yaml
	"$(OPM)" validate dist/catalog
	cd dist && "$(OPM)" generate dockerfile catalog

.PHONY: catalog-build
catalog-build: catalog ## Build the catalog image CATALOG_IMG (needs opm and a container engine).
	$(CONTAINER_TOOL) build -f dist/catalog.Dockerfile -t $(CATALOG_IMG) dist

##@ Dependencies

$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

## Tool Binaries
KUBECTL ?= kubectl
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT = $(LOCALBIN)/golangci-lint
# ENVTEST_ASSETS holds kube-apiserver and etcd; KUBEBUILDER_ASSETS, if set, wins.
ENVTEST_ASSETS = $(or $(KUBEBUILDER_ASSETS),$(ENVTEST_DIR))

## Tool Versions
KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Install kustomize locally if necessary.
$(KUSTOMIZE): $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen locally if necessary.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: envtest
envtest: ## Build envtest's kube-apiserver and etcd from Go modules into bin/envtest (once), unless KUBEBUILDER_ASSETS is set.
ifeq ($(KUBEBUILDER_ASSETS),)
envtest: $(ENVTEST_DIR)/kube-apiserver $(ENVTEST_DIR)/etcd
endif

$(ENVTEST_DIR)/kube-apiserver: hack/envtest/go.mod hack/envtest/kube-apiserver/main.go
	cd hack/envtest && go build -ldflags "-X k8s.io/component-base/version.gitVersion=$(KUBERNETES_VERSION)" -o "$@" ./kube-apiserver

$(ENVTEST_DIR)/etcd: hack/envtest/go.mod hack/envtest/etcd/main.go
	cd hack/envtest && go build -o "$@" ./etcd

# KubeVirt's own control plane for the test clusters: virt-api and
# virt-controller built from the kubevirt.io/kubevirt version hack/kubevirt
# pins, and its install generator (test/infrastructure/cluster runs it for every
# cluster). A cold build takes several minutes on two cores; the files are
# rebuilt only when hack/kubevirt changes.
KUBEVIRT_DIR ?= $(LOCALBIN)/kubevirt
KUBEVIRT_SOURCES = hack/kubevirt/go.mod hack/kubevirt/go.sum $(wildcard hack/kubevirt/install/*.go hack/kubevirt/stubs/*/*.go hack/kubevirt/stubs/*/*/*.go hack/kubevirt/stubs/*/*/*/*.go)

.PHONY: kubevirt
kubevirt: $(KUBEVIRT_DIR)/virt-api $(KUBEVIRT_DIR)/virt-controller $(KUBEVIRT_DIR)/install ## Build KubeVirt's virt-api and virt-controller and its install generator into bin/kubevirt (once per pinned version).

$(KUBEVIRT_DIR)/virt-api $(KUBEVIRT_DIR)/virt-controller: $(KUBEVIRT_DIR)/%: $(KUBEVIRT_SOURCES)
	cd hack/kubevirt && go build -o "$@" kubevirt.io/kubevirt/cmd/$*

$(KUBEVIRT_DIR)/install: $(KUBEVIRT_SOURCES)
	cd hack/kubevirt && go build -o "$@" ./install

# Only `make bench` needs it: Kubernetes' controller manager, for its PV binder.
$(ENVTEST_DIR)/kube-controller-manager: hack/envtest/go.mod hack/envtest/kube-controller-manager/main.go
	cd hack/envtest && go build -ldflags "-X k8s.io/component-base/version.gitVersion=$(KUBERNETES_VERSION)" -o "$@" ./kube-controller-manager

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint locally if necessary.
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Installing $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" go install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath "$(1)-$(3)")" "$(1)"
endef

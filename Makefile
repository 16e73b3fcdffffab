# SPDX-License-Identifier: Apache-2.0
# Airlock build. `make` builds the binaries; `make test` installs what it needs,
# builds, and runs unit, fuzz-smoke and integration tests; `make demo` runs a
# real command in a real microVM through the daemon.

CC ?= gcc
BUILD ?= build
OPT ?= -O2
CFLAGS_BASE := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers \
	-Wformat=2 -fno-strict-aliasing -g $(OPT) -Iinclude -Isrc/common -I/usr/include/postgresql
CFLAGS ?=
CFLAGS_ALL = $(CFLAGS_BASE) $(CFLAGS)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

COMMON_SRC := $(wildcard src/common/*.c)
include src/daemon/layers.mk
# The layers' folders, with vmm/* and the like expanded to the folders there;
# a folder's LAYER_USES_ is its own or, for one of a /* pattern, the pattern's.
DAEMON_LAYER_DIRS := $(foreach l,$(DAEMON_LAYERS),$(if $(findstring *,$(l)),\
	$(patsubst src/daemon/%/,%,$(sort $(wildcard src/daemon/$(l)/))),$(l)))
layer_uses = $(if $(filter undefined,$(origin LAYER_USES_$(1))),$(LAYER_USES_$(dir $(1))*),$(LAYER_USES_$(1)))
DAEMON_SRC := $(foreach l,$(DAEMON_LAYER_DIRS),$(wildcard src/daemon/$(l)/*.c))
DAEMON_INC := $(DAEMON_LAYER_DIRS:%=-Isrc/daemon/%)
CLI_SRC := $(wildcard src/cli/*.c)
AGENT_SRC := $(wildcard src/agent/*.c)
EGRESS_SRC := $(wildcard src/egress/*.c)
JAILER_SRC := $(wildcard src/jailer/*.c)
OCI_SRC := $(wildcard src/oci/*.c)
FRONT_SRC := $(wildcard src/front/*.c)
HEADERS := $(wildcard include/airlock/*.h src/*/*.h) $(foreach l,$(DAEMON_LAYER_DIRS),$(wildcard src/daemon/$(l)/*.h))

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
AGENT_OBJ := $(AGENT_SRC:%.c=$(BUILD)/obj/%.o)
EGRESS_OBJ := $(EGRESS_SRC:%.c=$(BUILD)/obj/%.o)
JAILER_OBJ := $(JAILER_SRC:%.c=$(BUILD)/obj/%.o)
OCI_OBJ := $(OCI_SRC:%.c=$(BUILD)/obj/%.o)
FRONT_OBJ := $(FRONT_SRC:%.c=$(BUILD)/obj/%.o)

DAEMON_LIBS := -lmicrohttpd -lhttp_parser -ljansson -lsqlite3 -lpq -lcrypto -lpthread -lseccomp -larchive
CLI_LIBS := -lcurl -ljansson -lmicrohttpd -lpthread
EGRESS_LIBS := -ljansson -lssl -lcrypto -lpthread -lcares -lseccomp
JAILER_LIBS := -lseccomp -ljansson
OCI_LIBS := -larchive -ljansson -lcrypto
FRONT_LIBS := -lpq -ljansson -lcrypto -lpthread
# (libpq's header folder is in CFLAGS_BASE.)
FRONT_CFLAGS := -Isrc/front

.PHONY: build-clang all deps test unit fuzz-smoke integration demo images clean format format-check bench test-kvm

EGRESS_BIN := $(if $(EGRESS_SRC),$(BUILD)/airlock-egress)
JAILER_BIN := $(if $(JAILER_SRC),$(BUILD)/airlock-jailer)
OCI_BIN := $(if $(OCI_SRC),$(BUILD)/airlock-oci)
FRONT_BIN := $(if $(FRONT_SRC),$(BUILD)/airlock-api)

# The web console (docs/console.md) is part of `all` once its npm packages are
# there (`make deps` or `make deps-npm` installs them); `make ui` asks for it.
UI_BUILD := $(if $(wildcard ui/node_modules/esbuild),$(BUILD)/ui/index.html)

all: $(BUILD)/airlockd $(BUILD)/airlock $(BUILD)/airlock-agent $(EGRESS_BIN) $(JAILER_BIN) $(OCI_BIN) $(FRONT_BIN) $(UI_BUILD)

# ui/src bundled by esbuild (ui/build.mjs) with the packages pinned in
# ui/package-lock.json into $(BUILD)/ui: static files, nothing fetched at run
# time. airlockd serves them at /ui (--ui-dir; default $(BUILD)/ui next to it).
.PHONY: ui
ui: $(BUILD)/ui/index.html
$(BUILD)/ui/index.html: $(wildcard ui/src/*) ui/build.mjs ui/package-lock.json
	@[ -d ui/node_modules/esbuild ] || { echo "ui: ui/node_modules is missing: run 'make deps-npm'" >&2; exit 1; }
	node ui/build.mjs $(BUILD)/ui

$(BUILD)/obj/%.o: %.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libairlock-common.a: $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Each layer of the daemon sees only the headers of the layers it may use
# (src/daemon/layers.mk): an include across the rule does not compile.
layer_inc = -Isrc/daemon/$(1) $(addprefix -Isrc/daemon/,$(call layer_uses,$(1)))
define layer_flags
$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard src/daemon/$(1)/*.c)): CFLAGS_ALL += $(call layer_inc,$(1))
endef
$(foreach l,$(DAEMON_LAYER_DIRS),$(eval $(call layer_flags,$(l))))

$(BUILD)/airlockd: $(DAEMON_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(DAEMON_OBJ) $(BUILD)/libairlock-common.a $(DAEMON_LIBS)

$(BUILD)/airlock: $(CLI_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJ) $(BUILD)/libairlock-common.a $(CLI_LIBS)

# The egress gateway: unprivileged, one per host.
$(BUILD)/airlock-egress: $(EGRESS_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(EGRESS_OBJ) $(BUILD)/libairlock-common.a $(EGRESS_LIBS)

# The jailer: one-shot, puts one VMM in its jail and execs it (docs/jailer.md).
$(BUILD)/airlock-jailer: $(JAILER_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(JAILER_OBJ) $(BUILD)/libairlock-common.a $(JAILER_LIBS)

# The image importer: one-shot, run by airlockd as root on a tenant's docker
# save archive or OCI layout (issue 23): layers into an ext4 template image.
$(BUILD)/airlock-oci: $(OCI_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(OCI_OBJ) $(BUILD)/libairlock-common.a $(OCI_LIBS)

# The cluster's front (issue 24, docs/cluster.md): stateless, several replicas
# behind a load balancer, its state in PostgreSQL.
$(FRONT_OBJ): CFLAGS_ALL += $(FRONT_CFLAGS)
$(BUILD)/airlock-api: $(FRONT_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -o $@ $(FRONT_OBJ) $(BUILD)/libairlock-common.a $(FRONT_LIBS)

# The agent is PID 1 in the guest: static, no loader, no shared libraries.
$(BUILD)/airlock-agent: $(AGENT_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -static -o $@ $(AGENT_OBJ) $(BUILD)/libairlock-common.a -ljansson

include tests/tests.mk
include images/images.mk

deps:
	./scripts/deps.sh

# The two halves of deps, for `make test` (tests/tests.mk): the apt packages
# first, on their own; the npm packages of tests/e2b, tests/mcp, tests/ui,
# tests/deploy and the console (ui/) while it compiles.
.PHONY: deps-apt deps-npm
deps-apt:
	./scripts/deps.sh apt
deps-npm:
	./scripts/deps.sh npm

# deps first, on its own: nothing can compile before the packages are there.
demo:
	./scripts/deps.sh
	$(MAKE) all images-all
	./scripts/demo.sh

# The tree must build warning-free under both compilers.
build-clang:
	$(MAKE) BUILD=$(BUILD)/clang CC=clang $(BUILD)/clang/airlockd $(BUILD)/clang/airlock $(BUILD)/clang/airlock-agent \
		$(if $(EGRESS_SRC),$(BUILD)/clang/airlock-egress) $(if $(JAILER_SRC),$(BUILD)/clang/airlock-jailer) \
		$(if $(OCI_SRC),$(BUILD)/clang/airlock-oci) $(if $(FRONT_SRC),$(BUILD)/clang/airlock-api)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)/obj $(BUILD)/test $(BUILD)/fuzz $(BUILD)/*.a $(BUILD)/airlockd $(BUILD)/airlock $(BUILD)/airlock-agent $(BUILD)/airlock-jailer $(BUILD)/airlock-oci \
		$(BUILD)/airlock-api

# ---------------------------------------------------------------- install
# `make install`, as root on the host (docs/kvm-host.md, "Install"):
#   $(PREFIX)/bin                  airlockd, airlock, airlock-jailer, airlock-egress, airlock-oci,
#                                  airlock-api (the cluster's front)
#                                  (airlockd runs the jailer and the gateway next to itself)
#   $(PREFIX)/share/airlock/seccomp/qemu-x86_64.json   the VMM's seccomp profile
#   $(PREFIX)/share/airlock/images the guest kernels and templates built under
#                                  $(BUILD)/images, only those that were built
#   $(PREFIX)/share/airlock/ui     the web console ($(BUILD)/ui, when `make ui` built
#                                  it): airlockd in $(PREFIX)/bin finds it there
#   $(SYSTEMD_UNIT_DIR)/airlockd.service  default $(PREFIX)/lib/systemd/system, which
#                                  systemd searches for /usr/local and /usr; for another
#                                  PREFIX give SYSTEMD_UNIT_DIR=/etc/systemd/system
#   $(CONFDIR)/airlockd.conf       (/etc/airlock) never overwritten: when it differs
#                                  from the new default, that goes next to it as .new
# The unit and the config file name the installed paths (PREFIX, /etc/airlock): the
# config file's seccomp-profile and image-dir are where this installs them, whatever
# PREFIX is. DESTDIR is put in front of every path (packaging); nothing is started.
# install needs `all` (nothing is rebuilt when it is up to date) but not `images-all`,
# which needs root, the network and minutes (`make all images-all` first; install says
# so when no image is built). `make uninstall` removes what install put there, but the
# config file when it was changed, and never touches /var/lib/airlock (the state).
PREFIX ?= /usr/local
DESTDIR ?=
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
CONFDIR ?= /etc/airlock
INSTALL ?= install
INSTALL_BINDIR = $(PREFIX)/bin
INSTALL_DATADIR = $(PREFIX)/share/airlock
INSTALL_IMAGES = $(DESTDIR)$(INSTALL_DATADIR)/images
INSTALL_BINS := airlockd airlock airlock-jailer airlock-egress airlock-oci airlock-api
INSTALL_KERNEL_FILES := vmlinuz vmlinux initramfs.cpio
INSTALL_TEMPLATE_FILES := rootfs.ext4 template.json
# The paths go into sed expressions and shell words unquoted: keep them plain.
install_check = for v in "PREFIX=$(PREFIX)" "CONFDIR=$(CONFDIR)" "SYSTEMD_UNIT_DIR=$(SYSTEMD_UNIT_DIR)" \
		"DESTDIR=$(DESTDIR)"; do \
		case "$${v\#*=}" in \
		*[!A-Za-z0-9_./+-]*) echo "install: $$v: only A-Z a-z 0-9 _ . / + - please" >&2; exit 1;; \
		/*) ;; \
		"") [ "$${v%%=*}" = DESTDIR ] || { echo "install: $${v%%=*} is empty" >&2; exit 1; };; \
		*) echo "install: $$v is not an absolute path" >&2; exit 1;; \
		esac; \
	done
install_subst = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(INSTALL_BINDIR)|g' \
	-e 's|@DATADIR@|$(INSTALL_DATADIR)|g' -e 's|@CONFDIR@|$(CONFDIR)|g'
# $(call install_gen,TEMPLATE,DEST): TEMPLATE substituted, written to DEST (0644) by a rename.
install_gen = $(install_subst) $(1) >$(2).tmp && chmod 0644 $(2).tmp && mv -f $(2).tmp $(2)

.PHONY: install uninstall
install: all
	@$(install_check)
	$(INSTALL) -d -m 0755 $(DESTDIR)$(INSTALL_BINDIR) $(DESTDIR)$(INSTALL_DATADIR)/seccomp \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(CONFDIR)
	$(INSTALL) -m 0755 $(INSTALL_BINS:%=$(BUILD)/%) $(DESTDIR)$(INSTALL_BINDIR)/
	$(INSTALL) -m 0644 security/seccomp/qemu-x86_64.json $(DESTDIR)$(INSTALL_DATADIR)/seccomp/qemu-x86_64.json
	$(call install_gen,packaging/systemd/airlockd.service,$(DESTDIR)$(SYSTEMD_UNIT_DIR)/airlockd.service)
	@set -e; if [ -f $(BUILD)/ui/index.html ]; then \
		rm -rf $(DESTDIR)$(INSTALL_DATADIR)/ui; $(INSTALL) -d -m 0755 $(DESTDIR)$(INSTALL_DATADIR)/ui; \
		for f in $(BUILD)/ui/*; do [ ! -f $$f ] || $(INSTALL) -m 0644 $$f $(DESTDIR)$(INSTALL_DATADIR)/ui/; done; \
		echo "install: the console in $(INSTALL_DATADIR)/ui"; \
	else echo "install: no console ($(BUILD)/ui): 'make deps-npm ui' builds it"; fi
	@set -e; src=$(BUILD)/images; dst=$(INSTALL_IMAGES); kernels=0; templates=""; \
	for f in $(INSTALL_KERNEL_FILES); do \
		[ -f $$src/kernels/$$f ] || continue; \
		$(INSTALL) -d -m 0755 $$dst $$dst/kernels; \
		$(INSTALL) -m 0644 $$src/kernels/$$f $$dst/kernels/$$f; kernels=$$((kernels + 1)); \
	done; \
	for t in $$src/templates/*/rootfs.ext4; do \
		[ -f $$t ] || continue; \
		name=$$(basename $$(dirname $$t)); \
		$(INSTALL) -d -m 0755 $$dst $$dst/templates $$dst/templates/$$name; \
		for f in $(INSTALL_TEMPLATE_FILES); do \
			[ ! -f $$src/templates/$$name/$$f ] || \
				$(INSTALL) -m 0644 $$src/templates/$$name/$$f $$dst/templates/$$name/$$f; \
		done; \
		templates="$$templates $$name"; \
	done; \
	if [ $$kernels = 0 ] || [ -z "$$templates" ]; then \
		echo "install: WARNING: no guest kernel or no template under $$src: airlockd cannot start" \
			"sandboxes; run 'make images-all' (as root) and 'make install' again"; \
	else \
		echo "install: images: $$kernels kernel files, templates:$$templates"; \
	fi
	@set -e; conf=$(DESTDIR)$(CONFDIR)/airlockd.conf; \
	if [ ! -e $$conf ] && [ ! -L $$conf ]; then \
		$(call install_gen,packaging/airlockd.conf,$$conf); echo "install: $$conf"; \
	elif $(install_subst) packaging/airlockd.conf | cmp -s - $$conf; then \
		rm -f $$conf.new; echo "install: $$conf is already the default"; \
	else \
		$(call install_gen,packaging/airlockd.conf,$$conf.new); \
		echo "install: kept your $$conf; the new default is $$conf.new (compare them)"; \
	fi
	@echo "install: done. Then: systemctl daemon-reload && systemctl enable --now airlockd" \
		"(docs/kvm-host.md)"

uninstall:
	@$(install_check)
	rm -f $(INSTALL_BINS:%=$(DESTDIR)$(INSTALL_BINDIR)/%) $(DESTDIR)$(INSTALL_DATADIR)/seccomp/qemu-x86_64.json \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR)/airlockd.service $(INSTALL_KERNEL_FILES:%=$(INSTALL_IMAGES)/kernels/%)
	@set -e; for d in $(INSTALL_IMAGES)/templates/*/; do \
		[ -d $$d ] || continue; \
		rm -f $(INSTALL_TEMPLATE_FILES:%=$${d}%); \
		rmdir $$d 2>/dev/null || echo "uninstall: kept $$d: it holds files install did not put there"; \
	done
	rm -rf $(DESTDIR)$(INSTALL_DATADIR)/ui
	@for d in $(INSTALL_IMAGES)/templates $(INSTALL_IMAGES)/kernels $(INSTALL_IMAGES) \
		$(DESTDIR)$(INSTALL_DATADIR)/seccomp $(DESTDIR)$(INSTALL_DATADIR); do \
		[ ! -d $$d ] || rmdir $$d 2>/dev/null || echo "uninstall: kept $$d: it holds files install did not put there"; \
	done
	@set -e; conf=$(DESTDIR)$(CONFDIR)/airlockd.conf; rm -f $$conf.new; \
	if [ -f $$conf ] && $(install_subst) packaging/airlockd.conf | cmp -s - $$conf; then \
		rm -f $$conf; \
	elif [ -e $$conf ]; then \
		echo "uninstall: kept $$conf (changed since install)"; \
	fi; \
	rmdir $(DESTDIR)$(CONFDIR) 2>/dev/null || true
	@echo "uninstall: done ($(DESTDIR)/var/lib/airlock is not touched; stop airlockd first:" \
		"systemctl disable --now airlockd)"

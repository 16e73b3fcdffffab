# SPDX-License-Identifier: Apache-2.0
# Airlock build. `make` builds the binaries; `make test` installs what it needs,
# builds, and runs unit, fuzz-smoke and integration tests; `make demo` runs a
# real command in a real microVM through the daemon.

CC ?= gcc
BUILD ?= build
OPT ?= -O2
CFLAGS_BASE := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers \
	-Wformat=2 -fno-strict-aliasing -g $(OPT) -Iinclude -Isrc/common
CFLAGS ?=
CFLAGS_ALL = $(CFLAGS_BASE) $(CFLAGS)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

COMMON_SRC := $(wildcard src/common/*.c)
DAEMON_SRC := $(wildcard src/daemon/*.c)
CLI_SRC := $(wildcard src/cli/*.c)
AGENT_SRC := $(wildcard src/agent/*.c)
EGRESS_SRC := $(wildcard src/egress/*.c)
JAILER_SRC := $(wildcard src/jailer/*.c)
HEADERS := $(wildcard include/airlock/*.h src/*/*.h)

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o)
# airlockd validates egress policies with the gateway's own rule parser.
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/src/egress/egress-host.o $(BUILD)/obj/src/egress/egress-addr.o
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
AGENT_OBJ := $(AGENT_SRC:%.c=$(BUILD)/obj/%.o)
EGRESS_OBJ := $(EGRESS_SRC:%.c=$(BUILD)/obj/%.o)
JAILER_OBJ := $(JAILER_SRC:%.c=$(BUILD)/obj/%.o)

DAEMON_LIBS := -lmicrohttpd -ljansson -lsqlite3 -lcrypto -lpthread -lseccomp
CLI_LIBS := -lcurl -ljansson
EGRESS_LIBS := -ljansson -lssl -lcrypto -lpthread -lcares
JAILER_LIBS := -lseccomp -ljansson

.PHONY: build-clang all deps test unit fuzz-smoke integration demo images clean format format-check bench test-kvm

EGRESS_BIN := $(if $(EGRESS_SRC),$(BUILD)/airlock-egress)
JAILER_BIN := $(if $(JAILER_SRC),$(BUILD)/airlock-jailer)

all: $(BUILD)/airlockd $(BUILD)/airlock $(BUILD)/airlock-agent $(EGRESS_BIN) $(JAILER_BIN)

$(BUILD)/obj/%.o: %.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libairlock-common.a: $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(DAEMON_SRC:%.c=$(BUILD)/obj/%.o): CFLAGS_ALL += -Isrc/egress

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

# The agent is PID 1 in the guest: static, no loader, no shared libraries.
$(BUILD)/airlock-agent: $(AGENT_OBJ) $(BUILD)/libairlock-common.a
	$(CC) $(CFLAGS_ALL) -static -o $@ $(AGENT_OBJ) $(BUILD)/libairlock-common.a -ljansson

include tests/tests.mk
include images/images.mk

deps:
	./scripts/deps.sh

# deps first, on its own: nothing can compile before the packages are there.
demo:
	./scripts/deps.sh
	$(MAKE) all images-all
	./scripts/demo.sh

# The tree must build warning-free under both compilers.
build-clang:
	$(MAKE) BUILD=$(BUILD)/clang CC=clang $(BUILD)/clang/airlockd $(BUILD)/clang/airlock $(BUILD)/clang/airlock-agent \
		$(if $(EGRESS_SRC),$(BUILD)/clang/airlock-egress) $(if $(JAILER_SRC),$(BUILD)/clang/airlock-jailer)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)/obj $(BUILD)/test $(BUILD)/fuzz $(BUILD)/*.a $(BUILD)/airlockd $(BUILD)/airlock $(BUILD)/airlock-agent $(BUILD)/airlock-jailer

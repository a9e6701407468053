# Phoenix top-level build.  Each part adds its own rules from <part>/build.mk;
# TESTS collects the test targets that `make test` runs in order.
#
#   make            build libphoenix, libphxfile, phxfs and the tools
#   make run        install dependencies, build, mount phxfs at /mnt/phx
#   make test       install dependencies, build, run every CPU suite
#   make test-gpu   the same suites against CUDA devices (GPU machine)
#   make check-asan the userspace suites under ASan + UBSan

BUILD ?= build
PREFIX ?= /usr/local
CC ?= gcc
SAN ?=

WARN := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow \
	-Wmissing-prototypes -Wstrict-prototypes
CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -fPIC -pthread $(WARN) -D_GNU_SOURCE -MMD -MP
ifeq ($(SAN),1)
BUILD := build-asan
CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
LDLIBS := -ldl -pthread

TESTS :=
ALL :=

.PHONY: all deps test test-gpu check-asan check-asan-run run install clean format
all: build-all

include lib/build.mk
-include phxfs/build.mk
-include python/build.mk
-include kmod/build.mk
include lib/fio/build.mk
include scripts/bench/build.mk

build-all: $(ALL)

deps:
	@sh scripts/deps.sh

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory -k $(TESTS)
	@echo "== libphoenix and phxfs under ASan + UBSan"
	@$(MAKE) --no-print-directory check-asan-run

test-gpu:
	@PHX_DEVICE=cuda $(MAKE) --no-print-directory $(filter-out test-kmod test-passthrough test-format test-sizes,$(TESTS))

check-asan: deps
	@$(MAKE) --no-print-directory check-asan-run

check-asan-run:
	@$(MAKE) --no-print-directory SAN=1 test-lib
	@PHX_SANITIZED=1 $(MAKE) --no-print-directory SAN=1 test-phxfs
	@PHX_SANITIZED=1 $(MAKE) --no-print-directory SAN=1 test-phxfs-uring

run: deps
	@$(MAKE) --no-print-directory all
	@sh scripts/run.sh

clean:
	rm -rf build build-asan

# The C sources in kernel style (.clang-format); kmod/ is the kernel's
# own style, checked by its build (make kmod).
FORMAT_SRCS = $$(git ls-files '*.c' '*.h' | grep -v '^kmod/')

format:
	clang-format -i $(FORMAT_SRCS)

.PHONY: test-format
test-format:
	@clang-format --dry-run --Werror $(FORMAT_SRCS) || \
		{ echo "test-format: run make format"; exit 1; }
	@echo "test-format: $$(git ls-files '*.c' '*.h' | grep -vc '^kmod/') files formatted"

TESTS += test-format

# No source file over 700 lines (scripts/check-sizes.sh).
.PHONY: test-sizes
test-sizes:
	@sh scripts/check-sizes.sh

TESTS += test-sizes

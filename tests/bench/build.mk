# The GPU benchmarks.  Both are built with everything else so they always
# compile, and run on the GPU machine; the CUDA driver and cuFile are loaded
# at run time.
#
# phx-bench (tests/bench/phx-bench*.c): file <-> GPU rates of libphoenix
# and its peers, run by scripts/bench-gpu.sh.
#
# phx-kvbench (tests/bench/kvbench-*.c): LMCache's slab pattern, small
# random reads and set-up latency against cuFile and raw io_uring, run by
# scripts/bench-kv.sh.  make test-kvbench runs every mode on the simulated
# device (bytes checked, no times asserted) and its option refusals.

PHXBENCH_SRCS := $(wildcard tests/bench/phx-bench*.c) tests/bench/benchlib.c
PHXBENCH := $(BUILD)/phx-bench

$(PHXBENCH): $(PHXBENCH_SRCS) tests/bench/phx-bench.h tests/bench/benchlib.h \
		$(PHX_HEADERS) $(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -Itests/bench -o $@ $(PHXBENCH_SRCS) \
		$(LIB_A) $(URING_LIB) $(LDFLAGS) $(LDLIBS) -lm

KVBENCH_SRCS := $(wildcard tests/bench/kvbench-*.c) tests/bench/benchlib.c
KVBENCH := $(BUILD)/phx-kvbench

$(KVBENCH): $(KVBENCH_SRCS) tests/bench/kvbench.h tests/bench/benchlib.h \
		$(PHX_HEADERS) $(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -Itests/bench -o $@ $(KVBENCH_SRCS) \
		$(LIB_A) $(URING_LIB) $(LDFLAGS) $(LDLIBS) -lm

ALL += $(PHXBENCH) $(KVBENCH)

.PHONY: test-kvbench
test-kvbench: $(KVBENCH) $(PHXFILE_SO)
	@sh tests/bench/test-kvbench.sh $(KVBENCH)

TESTS += test-kvbench

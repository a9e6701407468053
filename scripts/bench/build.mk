# The benchmark programs, beside the scripts that run them.  phx-bench and
# phx-kvbench are built with everything else so they always compile, and
# run on the GPU machine; the CUDA driver and cuFile are loaded at run time.
#
# phx-bench (scripts/bench/phx-bench*.c): file <-> GPU rates of libphoenix
# and its peers, run by scripts/bench-gpu.sh.
#
# phx-kvbench (scripts/bench/kvbench-*.c): LMCache's slab pattern, small
# random reads and set-up latency against cuFile and raw io_uring, run by
# scripts/bench-kv.sh.  make test-kvbench runs every mode on the simulated
# device (bytes checked, no times asserted) and its option refusals.

PHXBENCH_SRCS := $(wildcard scripts/bench/phx-bench*.c) \
	scripts/bench/benchlib.c
PHXBENCH := $(BUILD)/phx-bench

$(PHXBENCH): $(PHXBENCH_SRCS) scripts/bench/phx-bench.h \
		scripts/bench/benchlib.h $(PHX_HEADERS) $(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -Iscripts/bench -o $@ $(PHXBENCH_SRCS) \
		$(LIB_A) $(URING_LIB) $(LDFLAGS) $(LDLIBS) -lm

KVBENCH_SRCS := $(wildcard scripts/bench/kvbench-*.c) scripts/bench/benchlib.c
KVBENCH := $(BUILD)/phx-kvbench

$(KVBENCH): $(KVBENCH_SRCS) scripts/bench/kvbench.h scripts/bench/benchlib.h \
		$(PHX_HEADERS) $(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -Iscripts/bench -o $@ $(KVBENCH_SRCS) \
		$(LIB_A) $(URING_LIB) $(LDFLAGS) $(LDLIBS) -lm

ALL += $(PHXBENCH) $(KVBENCH)

.PHONY: test-kvbench
test-kvbench: $(KVBENCH) $(PHXFILE_SO)
	@sh tests/bench/test-kvbench.sh $(KVBENCH)

TESTS += test-kvbench

# phx-cpubench (make bench-cpu): the engine on the simulated device against
# the raw disk into host memory; not part of make test.
$(BUILD)/phx-cpubench: scripts/bench/phx-cpubench.c $(PHX_HEADERS) $(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -o $@ $< $(LIB_A) $(URING_LIB) \
		$(LDFLAGS) $(LDLIBS)

.PHONY: bench-cpu
bench-cpu: $(BUILD)/phx-cpubench
	@mkdir -p $(BUILD)/bench
	$(BUILD)/phx-cpubench -s 1G -r 3 $(BUILD)/bench

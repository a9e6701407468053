# phx-kvbench (tests/bench/kvbench-*.c): LMCache's slab pattern, small
# random reads and set-up latency against cuFile and raw io_uring.
# Built with everything else so it always compiles; run on the GPU
# machine by scripts/bench-kv.sh.  make test-kvbench runs every mode on
# the simulated device (bytes checked, no times asserted) and its option
# refusals.

KVBENCH_SRCS := $(wildcard tests/bench/kvbench-*.c) tests/bench/benchlib.c
KVBENCH := $(BUILD)/phx-kvbench

$(KVBENCH): $(KVBENCH_SRCS) tests/bench/kvbench.h tests/bench/benchlib.h \
		$(LIB_A)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -Itests/bench -o $@ $(KVBENCH_SRCS) \
		$(LIB_A) $(URING_LIB) $(LDFLAGS) $(LDLIBS) -lm

ALL += $(KVBENCH)

.PHONY: test-kvbench
test-kvbench: $(KVBENCH) $(PHXFILE_SO)
	@sh tests/bench/test-kvbench.sh $(KVBENCH)

TESTS += test-kvbench

# phx.ko and its QEMU suite (docs/kmod.md).
#
#   make kmod        fetch the guest kernel's headers, build phx.ko
#   make test-kmod   run the QEMU suite (checks 1-5 of the module)
#   make test-passthrough  the QEMU suite of phxfs over phx.ko (FUSE
#                    passthrough; phxfs static with libfuse 3.18)

KMOD_KVER := 6.12.95+deb12-amd64
KMOD_DIR := $(BUILD)/kmod
KMOD_KDIR := $(KMOD_DIR)/sysroot/usr/src/linux-headers-$(KMOD_KVER)
KMOD_SRCS := $(wildcard kmod/*.c kmod/*.h) kmod/Kbuild
KMOD_TESTS := $(addprefix $(KMOD_DIR)/tests/,kmod_map kmod_dma kmod_safety kmod_races)
KMOD_TEST_LIB := $(KMOD_DIR)/tests/kmod_lib
KMOD_HOSTCHECK := $(KMOD_DIR)/tests/hostcheck
KMOD_CFLAGS := -O2 -g -std=gnu11 $(WARN) -D_GNU_SOURCE
KMOD_TEST_HDRS := $(wildcard tests/kmod/*.h) kmod/phx_uapi.h

.PHONY: kmod test-kmod test-passthrough

# Kbuild gets a clean environment: the top-level CC and CFLAGS are not
# the kernel's.  Warnings are errors, and kernel-doc must be clean.
kmod:
	@sh scripts/kmod-deps.sh $(BUILD)
	@mkdir -p $(KMOD_DIR)/src
	@cp -p $(KMOD_SRCS) $(KMOD_DIR)/src/
	@env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C $(KMOD_KDIR) \
		M=$(abspath $(KMOD_DIR)/src) W=1 KCFLAGS=-Werror modules
	@cp $(KMOD_DIR)/src/phx.ko $(KMOD_DIR)/phx.ko
	@$(KMOD_KDIR)/scripts/kernel-doc -none -Wall $(filter %.c %.h,$(KMOD_SRCS))

$(KMOD_TESTS): $(KMOD_DIR)/tests/%: tests/kmod/%.c $(KMOD_TEST_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(KMOD_CFLAGS) -static -o $@ $< $(URING_LIB) -pthread

# The kmod backend is only weakly referenced by the library core: pull it in.
$(KMOD_TEST_LIB): tests/kmod/kmod_lib.c $(KMOD_TEST_HDRS) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(KMOD_CFLAGS) $(PHX_CPPFLAGS) -static -o $@ $< \
		-Wl,-u,phx_kmod_ops $(LIB_A) $(URING_LIB) -ldl -pthread

$(KMOD_HOSTCHECK): tests/kmod/hostcheck.c $(KMOD_TEST_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(KMOD_CFLAGS) -o $@ $<

test-kmod: kmod $(KMOD_TESTS) $(KMOD_TEST_LIB) $(KMOD_HOSTCHECK)
	@sh scripts/kmod-test.sh $(BUILD)

# The guest runs phxfs and phx as static programs.
KMOD_FUSE_PROGS := $(addprefix $(KMOD_DIR)/tests/,kmod_fuse phxfs phx)

$(KMOD_DIR)/tests/kmod_fuse: tests/kmod/kmod_fuse.c $(KMOD_TEST_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(KMOD_CFLAGS) -static -o $@ $<

$(KMOD_DIR)/tests/phxfs: $(PHXFS_318_OBJS) $(PHXFSCTL_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $(PHXFS_318_OBJS) $(PHXFSCTL_OBJ) -Wl,-u,phx_kmod_ops $(LIB_A) \
		$(FUSE318_LIB) $(URING_LIB) -ldl -pthread

$(KMOD_DIR)/tests/phx: $(PHX_OBJS) $(PHXFSCTL_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $(PHX_OBJS) $(PHXFSCTL_OBJ) $(LIB_A) $(URING_LIB) -ldl \
		-pthread

test-passthrough: kmod $(KMOD_FUSE_PROGS) $(KMOD_HOSTCHECK)
	@sh scripts/kmod-test.sh $(BUILD) fuse

TESTS += test-kmod test-passthrough

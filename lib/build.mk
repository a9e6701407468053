# libphoenix: libphoenix.{a,so}, built from lib/src; tests in tests/lib.

# The folders of lib/src are its layers, bottom up (docs/architecture.md).
# A folder's files see, through the include path, only its own folder's
# headers and those of the layers below; the backends see none of each
# other's.  scripts/check-layers.sh checks calls and includes the same way.
LIB_DIRS := base device device/cuda device/sim device/kmod buf engine stream \
	registry
LIB_INC_base := base
LIB_INC_device := device base
LIB_INC_device/cuda := device/cuda device base
LIB_INC_device/sim := device/sim device base
LIB_INC_device/kmod := device/kmod device base
LIB_INC_buf := buf device base
LIB_INC_engine := engine buf device base
LIB_INC_stream := stream engine buf device base
LIB_INC_registry := registry stream engine buf device base
# The sanitized build is the debug build: lock rules are asserted there.
ifeq ($(SAN),1)
LIB_DEBUG := -DPHX_DEBUG
endif
lib_inc = $(addprefix -Ilib/src/,$(LIB_INC_$(patsubst lib/src/%/,%,$(dir $(1)))))
LIB_SRCS := $(foreach d,$(LIB_DIRS),$(wildcard lib/src/$(d)/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/lib/kernels_ptx.o
LIB_A := $(BUILD)/libphoenix.a
LIB_SO := $(BUILD)/libphoenix.so
PHX_CPPFLAGS := -Ilib/include
# The public header: phoenix.h, the one to include, and its parts in
# phoenix/ (docs/architecture.md).
PHX_HEADERS := lib/include/phoenix.h $(wildcard lib/include/phoenix/*.h)

# Build against cuda.h where the toolkit is installed; without it the CUDA
# backend uses its own declarations of the driver API (lib/src/device/cuda/cuda_api.h).
CUDA_HOME ?= /usr/local/cuda
# The kmod backend speaks phx.ko's uapi (kmod/phx_uapi.h).
$(BUILD)/lib/src/device/kmod/kmod.o: CFLAGS += -Ikmod

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
$(BUILD)/lib/src/device/cuda/%.o: CFLAGS += \
	-I$(CUDA_HOME)/include -DPHX_HAVE_CUDA_H
endif

# liburing is linked in statically so the library carries it to machines
# that lack it (the GPU hosts).
URING_A := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/liburing.a /usr/lib/liburing.a))
ifeq ($(URING_A),)
URING_LIB := -luring
else
URING_LIB := $(URING_A)
endif

$(BUILD)/lib/src/%.o: lib/src/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) $(LIB_DEBUG) $(PHX_CPPFLAGS) $(call lib_inc,$<) \
		-fvisibility=hidden -c $< -o $@

# The device kernels' PTX as a C string (lib/src/device/device.h, phx_kernels_ptx).
$(BUILD)/lib/kernels_ptx.c: lib/src/device/kernels.ptx
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	@{ echo '/* Generated from lib/src/device/kernels.ptx by lib/build.mk. */'; \
	  echo 'const char phx_kernels_ptx[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	  echo ';'; } > $@

$(BUILD)/lib/kernels_ptx.o: $(BUILD)/lib/kernels_ptx.c
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -Wno-missing-variable-declarations -fvisibility=hidden \
		-c $< -o $@

$(LIB_A): $(LIB_OBJS)
	@rm -f $@
	@echo "  AR      $@"
	@ar rcs $@ $^

$(LIB_SO): $(LIB_OBJS)
	@echo "  LD      $@"
	@ln -sf libphoenix.so $(BUILD)/libphoenix.so.0
	@$(CC) -shared -Wl,-soname,libphoenix.so.0 -Wl,--no-undefined -Wl,--exclude-libs,ALL \
		$(LDFLAGS) -o $@ $^ $(URING_LIB) $(LDLIBS)

ALL += $(LIB_A) $(LIB_SO)

# ---- tests ----------------------------------------------------------------
LIB_TEST_SRCS := $(wildcard tests/lib/*.c)
LIB_TEST_BIN := $(BUILD)/tests/test-lib

$(LIB_TEST_BIN): $(LIB_TEST_SRCS) tests/lib/util.h $(PHX_HEADERS) $(LIB_A)
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) $(FUSE_SYS_CFLAGS) -Itests/lib \
		$(foreach d,$(LIB_DIRS),-Ilib/src/$(d)) -o $@ \
		$(LIB_TEST_SRCS) $(LIB_A) $(URING_LIB) $(FUSE_SYS_LIB) -lcriterion \
		$(LDFLAGS) $(LDLIBS)

# Scratch space for the suites: ext4 (O_DIRECT) and tmpfs (no O_DIRECT).
PHX_TEST_DIR ?= $(BUILD)/scratch

.PHONY: test-lib
test-lib: $(LIB_TEST_BIN)
	@sh scripts/test-lib.sh $(LIB_TEST_BIN)

TESTS += test-lib

# Every call and include goes down the layers (the folders of lib/src), none
# between backends, and no file calls or includes another in a circle
# (docs/architecture.md).
.PHONY: test-layers
test-layers: $(LIB_A)
	@sh scripts/check-layers.sh $(LIB_SRCS:%.c=$(BUILD)/%.o)

TESTS += test-layers

# The device kernels' PTX, assembled by ptxas (no GPU needed).
.PHONY: test-ptx
test-ptx:
	@mkdir -p $(BUILD)
	@sh scripts/check-ptx.sh $(BUILD)

TESTS += test-ptx
-include $(LIB_OBJS:.o=.d)

# ---- install ---------------------------------------------------------------
.PHONY: install-lib
install-lib: $(LIB_A) $(LIB_SO)
	install -d $(DESTDIR)$(PREFIX)/include/phoenix $(DESTDIR)$(PREFIX)/lib
	install -m 644 lib/include/phoenix.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 lib/include/phoenix/*.h $(DESTDIR)$(PREFIX)/include/phoenix/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libphoenix.so.0
	ln -sf libphoenix.so.0 $(DESTDIR)$(PREFIX)/lib/libphoenix.so
	-ldconfig

install: install-lib

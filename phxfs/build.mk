# phxfs: the FUSE daemon and the phx command; tests in tests/phxfs.
#
# libfuse and libphoenix are linked statically so that the two binaries
# run on machines without them (the GPU hosts).
#
# PHX_FUSE picks the libfuse phxfs is built with:
#   3.18    (default) libfuse 3.18 built from Debian forky's source
#           package into $(BUILD)/libfuse by scripts/libfuse.sh: FUSE
#           over io_uring, FUSE passthrough to phx.ko, requests past
#           1 MiB, shared writable mmap of direct-I/O files, O_TMPFILE
#   system  the distribution's (3.14 on Debian 12): none of those
# Both variants always exist as $(BUILD)/phxfs-<variant>; $(BUILD)/phxfs
# is the one PHX_FUSE names.

PHX_FUSE ?= 3.18

FUSE_SYS_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_SYS_A := $(firstword $(wildcard $(shell pkg-config --variable=libdir fuse3 2>/dev/null)/libfuse3.a))
ifeq ($(FUSE_SYS_A),)
FUSE_SYS_LIB := $(shell pkg-config --libs fuse3 2>/dev/null)
else
FUSE_SYS_LIB := $(FUSE_SYS_A)
endif

# libnuma for libfuse's io_uring queues (one per CPU, memory of its node)
NUMA_A := $(firstword $(wildcard $(shell pkg-config --variable=libdir numa 2>/dev/null)/libnuma.a /usr/lib/$(shell $(CC) -dumpmachine)/libnuma.a))
NUMA_LIB := $(if $(NUMA_A),$(NUMA_A),-lnuma)
FUSE318 := $(BUILD)/libfuse/prefix
FUSE318_CFLAGS := -I$(FUSE318)/include/fuse3 -DFUSE_USE_VERSION=317
FUSE318_LIB := $(FUSE318)/lib/libfuse3.a $(NUMA_LIB) -lrt

# Three parts, each built once:
#   daemon/  the FUSE daemon phxfs (two builds, one per libfuse)
#   tool/    the phx command and the mount helper
#   client/  libphxfsctl, the one client of the control socket
#            (phxfs_client.h): a shared library for C programs and the
#            Python package, and one object that the daemon (for the
#            escaping) and phx link in.
PHXFS_SRCS := $(wildcard phxfs/daemon/*.c)
PHXFS_SYS_OBJS := $(PHXFS_SRCS:phxfs/daemon/%.c=$(BUILD)/phxfs-daemon-obj/%.o)
PHXFS_318_OBJS := $(PHXFS_SRCS:phxfs/daemon/%.c=$(BUILD)/phxfs318-daemon-obj/%.o)
PHX_SRCS := $(wildcard phxfs/tool/*.c)
PHX_OBJS := $(PHX_SRCS:phxfs/tool/%.c=$(BUILD)/phx-obj/%.o)

PHXFSCTL_OBJ := $(BUILD)/phxfsctl-obj/client.o
PHXFSCTL_SO := $(BUILD)/libphxfsctl.so
PHXFS_INCLUDES := -Iphxfs/client

$(PHXFSCTL_OBJ): phxfs/client/client.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHX_CPPFLAGS) $(PHXFS_INCLUDES) -c $< -o $@

$(PHXFSCTL_SO): $(PHXFSCTL_OBJ)
	@ln -sf libphxfsctl.so $(BUILD)/libphxfsctl.so.0
	$(CC) -shared -Wl,-soname,libphxfsctl.so.0 -Wl,--no-undefined \
		$(LDFLAGS) -o $@ $^

$(BUILD)/phx-obj/%.o: phxfs/tool/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHX_CPPFLAGS) $(PHXFS_INCLUDES) -Iphxfs/tool -c $< -o $@

$(FUSE318)/.built-3.18:
	@sh scripts/libfuse.sh $(BUILD)

PHXFS_DAEMON_CFLAGS := $(PHX_CPPFLAGS) $(PHXFS_INCLUDES) -Iphxfs/daemon

$(BUILD)/phxfs-daemon-obj/%.o: phxfs/daemon/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHXFS_DAEMON_CFLAGS) $(FUSE_SYS_CFLAGS) -c $< -o $@

$(BUILD)/phxfs318-daemon-obj/%.o: phxfs/daemon/%.c $(FUSE318)/.built-3.18
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHXFS_DAEMON_CFLAGS) $(FUSE318_CFLAGS) -c $< -o $@

$(BUILD)/phxfs-system: $(PHXFS_SYS_OBJS) $(PHXFSCTL_OBJ) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $(PHXFS_SYS_OBJS) $(PHXFSCTL_OBJ) -Wl,-u,phx_kmod_ops \
		$(LIB_A) $(FUSE_SYS_LIB) $(URING_LIB) $(LDLIBS)

$(BUILD)/phxfs-3.18: $(PHXFS_318_OBJS) $(PHXFSCTL_OBJ) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $(PHXFS_318_OBJS) $(PHXFSCTL_OBJ) -Wl,-u,phx_kmod_ops \
		$(LIB_A) $(FUSE318_LIB) $(URING_LIB) $(LDLIBS)

# Copied whenever it differs, so that switching PHX_FUSE takes effect.
$(BUILD)/phxfs: $(BUILD)/phxfs-$(PHX_FUSE) FORCE
	@cmp -s $< $@ || cp $< $@

.PHONY: FORCE

$(BUILD)/phx: $(PHX_OBJS) $(PHXFSCTL_OBJ) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $(PHX_OBJS) $(PHXFSCTL_OBJ) $(LIB_A) $(URING_LIB) $(LDLIBS)

ALL += $(BUILD)/phxfs $(BUILD)/phx $(PHXFSCTL_SO)

# `mount -t fuse.phxfs` runs mount.fuse.phxfs, which hands the options to
# fuse3's own helper (it drops fstab-only ones such as noauto and _netdev).
SBINDIR ?= /sbin
.PHONY: install-phxfs
install-phxfs: $(BUILD)/phxfs $(BUILD)/phx $(PHXFSCTL_SO)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin \
		$(DESTDIR)$(SBINDIR)
	install -m 755 $(BUILD)/phxfs $(DESTDIR)$(PREFIX)/sbin/phxfs
	install -m 755 $(BUILD)/phx $(DESTDIR)$(PREFIX)/bin/phx
	install -m 755 phxfs/tool/mount.fuse.phxfs $(DESTDIR)$(SBINDIR)/mount.fuse.phxfs
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib
	install -m 644 phxfs/client/phxfs_client.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(PHXFSCTL_SO) $(DESTDIR)$(PREFIX)/lib/libphxfsctl.so.0
	ln -sf libphxfsctl.so.0 $(DESTDIR)$(PREFIX)/lib/libphxfsctl.so

install: install-phxfs

.PHONY: test-phxfs
# Every device directory in turn: three simulated devices here, every GPU
# under make test-gpu.
# Requests through /dev/fuse here; test-phxfs-uring runs the suite again
# mounted with -o io_uring, the kernel's switched on (root, a kernel that
# has it).
test-phxfs: $(BUILD)/phxfs $(BUILD)/phx $(PHXFSCTL_SO)
	@PHX_SIM_DEVICES=$${PHX_SIM_DEVICES:-3} \
		sh tests/phxfs/run.sh $(BUILD) --each-device

.PHONY: test-phxfs-uring
test-phxfs-uring: $(BUILD)/phxfs $(BUILD)/phx $(PHXFSCTL_SO)
	@echo "== phxfs over io_uring"
	@sh tests/phxfs/run.sh $(BUILD) --io-uring on

# The same suite against the variant PHX_FUSE did not pick (simulated
# devices: the daemon path; passthrough itself is proved by
# test-passthrough in QEMU).
PHXFS_OTHER := $(if $(filter 3.18,$(PHX_FUSE)),system,3.18)
PHXFS_OTHER_DIR := $(BUILD)/fuse-$(PHXFS_OTHER)
.PHONY: test-phxfs-other
test-phxfs-other: $(BUILD)/phxfs-$(PHXFS_OTHER) $(BUILD)/phx $(LIB_SO) \
		$(PHXFSCTL_SO)
	@mkdir -p $(PHXFS_OTHER_DIR)
	@cp $(BUILD)/phxfs-$(PHXFS_OTHER) $(PHXFS_OTHER_DIR)/phxfs
	@cp $(BUILD)/phx $(LIB_SO) $(PHXFSCTL_SO) $(PHXFS_OTHER_DIR)/
	@echo "== phxfs built with libfuse $(PHXFS_OTHER)"
	@sh tests/phxfs/run.sh $(PHXFS_OTHER_DIR)

# No circles of calls or includes between the files of each part.
.PHONY: test-phxfs-circles
test-phxfs-circles: $(PHXFS_SYS_OBJS) $(PHX_OBJS) $(PHXFSCTL_OBJ)
	@sh scripts/check-circles.sh "phxfs daemon" $(PHXFS_SYS_OBJS) $(PHXFSCTL_OBJ)
	@sh scripts/check-circles.sh "phx tool" $(PHX_OBJS) $(PHXFSCTL_OBJ)

TESTS += test-phxfs-circles test-phxfs test-phxfs-uring test-phxfs-other
-include $(PHXFS_SYS_OBJS:.o=.d) $(PHXFS_318_OBJS:.o=.d) $(PHX_OBJS:.o=.d) \
	$(PHXFSCTL_OBJ:.o=.d)

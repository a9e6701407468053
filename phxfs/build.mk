# phxfs: the FUSE daemon and the phx command; tests in tests/phxfs.
#
# libfuse and libphoenix are linked statically so that the two binaries
# run on machines without them (the GPU hosts).

FUSE_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_A := $(firstword $(wildcard $(shell pkg-config --variable=libdir fuse3 2>/dev/null)/libfuse3.a))
ifeq ($(FUSE_A),)
FUSE_LIB := $(shell pkg-config --libs fuse3 2>/dev/null)
else
FUSE_LIB := $(FUSE_A)
endif

PHXFS_SRCS := phxfs/main.c phxfs/inode.c phxfs/device.c phxfs/ops.c \
	phxfs/ctl.c
PHXFS_OBJS := $(PHXFS_SRCS:phxfs/%.c=$(BUILD)/phxfs-obj/%.o)
PHX_CLI_OBJS := $(BUILD)/phxfs-obj/phx.o

$(BUILD)/phxfs-obj/%.o: phxfs/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHX_CPPFLAGS) $(FUSE_CFLAGS) -Iphxfs -c $< -o $@

$(BUILD)/phxfs: $(PHXFS_OBJS) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $(PHXFS_OBJS) $(LIB_A) $(FUSE_LIB) \
		$(URING_LIB) $(LDLIBS)

$(BUILD)/phx: $(PHX_CLI_OBJS) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $(PHX_CLI_OBJS) $(LIB_A) $(URING_LIB) $(LDLIBS)

ALL += $(BUILD)/phxfs $(BUILD)/phx

# `mount -t fuse.phxfs` runs mount.fuse.phxfs, which hands the options to
# fuse3's own helper (it drops fstab-only ones such as noauto and _netdev).
SBINDIR ?= /sbin
.PHONY: install-phxfs
install-phxfs: $(BUILD)/phxfs $(BUILD)/phx
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin \
		$(DESTDIR)$(SBINDIR)
	install -m 755 $(BUILD)/phxfs $(DESTDIR)$(PREFIX)/sbin/phxfs
	install -m 755 $(BUILD)/phx $(DESTDIR)$(PREFIX)/bin/phx
	install -m 755 phxfs/mount.fuse.phxfs $(DESTDIR)$(SBINDIR)/mount.fuse.phxfs
	install -d $(DESTDIR)$(PREFIX)/include
	install -m 644 phxfs/phxfs_client.h $(DESTDIR)$(PREFIX)/include/

install: install-phxfs

.PHONY: test-phxfs
test-phxfs: $(BUILD)/phxfs $(BUILD)/phx
	@python3 tests/phxfs/test_phxfs.py --build $(BUILD)

TESTS += test-phxfs
-include $(PHXFS_OBJS:.o=.d) $(PHX_CLI_OBJS:.o=.d)

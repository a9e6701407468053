/* SPDX-License-Identifier: MIT */
/* test_buf.c - device buffers: allocation, growth, sparseness, sharing. */
#include <sys/socket.h>
#include <sys/wait.h>

#include "util.h"

Test(device, list_and_open)
{
	struct phx_device_info info[8];
	struct phx_device *dev, *again;
	const char *why = NULL;
	enum phx_device_kind kind = phx_default_kind(&why);
	int n;

	cr_assert_neq(kind, PHX_DEVICE_NONE);
	cr_assert_not_null(why);
	n = phx_device_list(PHX_DEVICE_NONE, info, 8);
	cr_assert_geq(n, 1, "%s", phx_strerror_last());
	cr_assert_eq(info[0].kind, kind);
	cr_assert_gt(info[0].capacity, 0);
	dev = open_default();
	cr_assert_eq(phx_device_open(info[0].name, &again), 0);
	cr_assert_eq(dev, again, "same device, same object");
	phx_device_close(again);
	struct phx_device_info di;

	cr_assert_eq(phx_device_info(dev, &di), 0);
	cr_assert_str_eq(di.name, info[0].name);
	phx_device_close(dev);
}

Test(device, bad_names_and_missing_devices)
{
	struct phx_device *dev;

	cr_assert_eq(phx_device_open("nonsense", &dev), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "bad device name"));
	cr_assert_eq(phx_device_open("sim63", &dev), -ENODEV);
	cr_assert_eq(phx_device_open("gpu63", &dev), -ENODEV);
	cr_assert_str_not_empty(phx_strerror_last());
}

Test(device, sim_count_from_environment)
{
	struct phx_device_info info[8];

	setenv("PHX_SIM_DEVICES", "3", 1);
	cr_assert_eq(phx_device_list(PHX_DEVICE_SIM, info, 8), 3);
	cr_assert_str_eq(info[2].name, "sim2");
}

Test(buf, out_of_device_memory)
{
	struct phx_device *dev = open_default();
	struct phx_device_info info;
	struct phx_buf *a, *b;

	cr_assert_eq(phx_device_info(dev, &info), 0);
	/* a cap makes the test fast on any device */
	cr_assert_eq(phx_device_set_limit(dev, 64 * MiB), 0);
	cr_assert_eq(phx_buf_alloc(dev, 128 * MiB, 0, &a), -ENOSPC);
	cr_assert(strstr(phx_strerror_last(), "out of device memory"));
	cr_assert_eq(phx_buf_alloc(dev, 32 * MiB, 0, &a), 0);
	cr_assert_eq(phx_buf_alloc(dev, 0, PHX_BUF_SPARSE, &b), 0);
	cr_assert_eq(phx_buf_resize(b, 40 * MiB), 0, "sparse growth is free");
	char one = 1;

	cr_assert_eq(phx_memcpy_to_buf(b, 39 * MiB, &one, 1), 0, "%s",
		     phx_strerror_last());
	/* filling the sparse buffer runs out, and what is there stays */
	int fd = make_file(dir_direct(), 40 * MiB, 3, false, NULL);

	cr_assert_eq(phx_read(b, 0, fd, 0, 40 * MiB), -ENOSPC);
	char got = 0;

	cr_assert_eq(phx_memcpy_from_buf(&got, b, 39 * MiB, 1), 0);
	cr_assert_eq(got, 1);
	phx_buf_free(a);
	cr_assert_eq(phx_read(b, 0, fd, 0, 40 * MiB), 40 * MiB, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_alloc(dev, 1ULL << 50, 0, &a), -EFBIG);
	phx_buf_free(b);
	phx_device_close(dev);
}

/* A dense grow that does not fit leaves the buffer as it was. */
Test(buf, failed_dense_grow_keeps_nothing)
{
	struct phx_device *dev = open_default();
	struct phx_device_info info;
	struct phx_buf *buf = buf_new(dev, MiB, 0);
	unsigned char data[4096];
	uint64_t before, committed = phx_buf_committed(buf);

	fill_random(data, sizeof(data), 6);
	cr_assert_eq(
		phx_memcpy_to_buf(buf, MiB - sizeof(data), data, sizeof(data)),
		0);
	cr_assert_eq(phx_device_info(dev, &info), 0);
	before = info.used;
	cr_assert_eq(phx_buf_resize(buf, 1ULL << 40), -ENOSPC);
	cr_assert_eq(phx_device_info(dev, &info), 0);
	cr_assert_eq(info.used, before, "the memory it took went back");
	cr_assert_eq(phx_buf_committed(buf), committed);
	cr_assert_eq(phx_buf_size(buf), MiB);
	assert_buf_eq(buf, MiB - sizeof(data), data, sizeof(data));
	cr_assert_eq(phx_buf_resize(buf, 2 * MiB), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, MiB - sizeof(data), data, sizeof(data));
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(buf, growth_preserves_data)
{
	struct phx_device *dev = open_default();
	size_t n = 3 * MiB + 5;
	unsigned char *data = xmalloc(n), *zero = calloc(1, MiB);
	struct phx_buf *buf;
	phx_dptr_t before;

	fill_random(data, n, 11);
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, data, n), 0);
	before = phx_buf_dptr(buf);
	/* past the initial reservation: the chunks move, the bytes do not */
	cr_assert_eq(phx_buf_resize(buf, 700 * MiB), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_size(buf), 700 * MiB);
	(void)before;
	assert_buf_eq(buf, 0, data, n);
	assert_buf_eq(buf, n, zero, MiB);
	assert_buf_eq(buf, 699 * MiB, zero, MiB);

	/* shrink, then grow again: the cut-off part reads as zeros */
	cr_assert_eq(phx_buf_resize(buf, 1000), 0);
	cr_assert_eq(phx_buf_resize(buf, n), 0);
	assert_buf_eq(buf, 0, data, 1000);
	assert_buf_eq(buf, 1000, zero, MiB);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(zero);
}

Test(buf, sparse_until_written)
{
	struct phx_device *dev = open_default();
	struct phx_device_info info;
	struct phx_buf *buf;
	unsigned char data[5000], back[5000];
	uint64_t used0;

	cr_assert_eq(phx_device_info(dev, &info), 0);
	used0 = info.used;
	cr_assert_eq(phx_buf_alloc(dev, 8ULL << 30, PHX_BUF_SPARSE, &buf), 0,
		     "%s", phx_strerror_last());
	cr_assert_eq(phx_buf_committed(buf), 0);
	fill_random(data, sizeof(data), 5);
	cr_assert_eq(phx_memcpy_to_buf(buf, 5ULL << 30, data, sizeof(data)), 0);
	cr_assert_leq(phx_buf_committed(buf), 64 * MiB,
		      "one write commits one chunk, not the buffer");
	cr_assert_eq(phx_device_info(dev, &info), 0);
	cr_assert_eq(info.used - used0, phx_buf_committed(buf));
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 5ULL << 30, sizeof(back)),
		     0);
	cr_assert(!memcmp(back, data, sizeof(data)));
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 1ULL << 30, sizeof(back)),
		     0);
	for (size_t i = 0; i < sizeof(back); i++)
		cr_assert_eq(back[i], 0, "holes read as zeros");
	phx_buf_free(buf);
	cr_assert_eq(phx_device_info(dev, &info), 0);
	cr_assert_eq(info.used, used0, "free returns the memory");
	phx_device_close(dev);
}

Test(buf, memory_given_back_reads_as_zeros_when_allocated_again)
{
	struct phx_device *dev = open_default();
	size_t n = 160 * MiB + 12345;
	unsigned char *data = xmalloc(n);
	struct phx_buf *buf;
	unsigned int round;

	fill_random(data, n, 21);
	/* dense, then sparse backed by writes: chunks of every size */
	for (round = 0; round < 3; round++) {
		cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0, "%s",
			     phx_strerror_last());
		assert_zeros(buf, 0, n, "a new buffer");
		cr_assert_eq(phx_memcpy_to_buf(buf, 0, data, n), 0);
		phx_buf_free(buf);
	}
	cr_assert_eq(phx_buf_alloc(dev, n, PHX_BUF_SPARSE, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 70 * MiB + 1, data, 4096), 0);
	assert_zeros(buf, 0, 70 * MiB + 1, "around a write into a hole");
	assert_zeros(buf, 70 * MiB + 4097, 30 * MiB, "after it");
	phx_buf_free(buf);
	free(data);
	phx_device_close(dev);
}

Test(buf, device_to_device_copy)
{
	struct phx_device *dev = open_default();
	size_t n = 2 * MiB + 3;
	unsigned char *data = xmalloc(n);
	struct phx_buf *a, *b;

	fill_random(data, n, 8);
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &a), 0);
	cr_assert_eq(phx_buf_alloc(dev, 0, PHX_BUF_SPARSE, &b), 0);
	cr_assert_eq(phx_buf_resize(b, n + 10), 0);
	cr_assert_eq(phx_memcpy_to_buf(a, 0, data, n), 0);
	cr_assert_eq(phx_memcpy_buf(b, 10, a, 0, n), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(b, 10, data, n);
	phx_buf_free(a);
	phx_buf_free(b);
	phx_device_close(dev);
	free(data);
}

/* The child imports the parent's buffer, checks it and writes into it. */
static int child_import(int sock, const unsigned char *want, size_t n)
{
	struct phx_device *dev;
	struct phx_buf *buf;
	unsigned char *got = malloc(n);
	char ok = 0;

	if (phx_device_open(NULL, &dev) || phx_buf_recv(dev, sock, &buf)) {
		fprintf(stderr, "import: %s\n", phx_strerror_last());
		return 1;
	}
	if (phx_buf_size(buf) != n || phx_memcpy_from_buf(got, buf, 0, n) ||
	    memcmp(got, want, n))
		return 2;
	/* in place: the parent sees this */
	memset(got, 0x5a, 4096);
	if (phx_memcpy_to_buf(buf, 8192, got, 4096))
		return 3;
	if (phx_buf_resize(buf, 2 * n) != -EPERM)
		return 4;
	phx_buf_free(buf);
	phx_device_close(dev);
	return write(sock, &ok, 1) == 1 ? 0 : 5;
}

Test(buf, export_import_between_processes)
{
	struct phx_device *dev;
	size_t n = 6 * MiB + 1234;
	unsigned char *data = xmalloc(n), *back = xmalloc(4096);
	struct phx_buf *buf;
	int sv[2], status;
	char c;
	pid_t pid;

	fill_random(data, n, 21);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(child_import(sv[1], data, n));
	}
	close(sv[1]);
	/* Only now: CUDA cannot be used in a child forked after it started. */
	dev = open_default();
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, data, n), 0);
	cr_assert_eq(phx_buf_send(buf, sv[0]), 0, "%s", phx_strerror_last());
	cr_assert_eq(read(sv[0], &c, 1), 1, "child finished");
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child failed with %d", WEXITSTATUS(status));
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 8192, 4096), 0);
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(back[i], 0x5a, "child's write is visible");
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(back);
}

/* A CUDA driver does not survive fork(): the child is told why. */
Test(device, cuda_in_a_forked_child_is_refused)
{
	struct phx_device *dev, *cdev;
	int sv[2], status;
	char msg[512] = "";
	ssize_t n;
	pid_t pid;

	if (phx_default_kind(NULL) != PHX_DEVICE_CUDA)
		cr_skip_test("CUDA only: other devices work in a forked child");
	dev = open_default();
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int ret = phx_device_open(NULL, &cdev);
		const char *why = phx_strerror_last();

		if (write(sv[1], why, strlen(why)) < 0)
			_exit(2);
		_exit(ret == -ENODEV ? 0 : 1);
	}
	close(sv[1]);
	n = read(sv[0], msg, sizeof(msg) - 1);
	cr_assert_geq(n, 0);
	msg[n] = '\0';
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "open in the child gave: %s", msg);
	cr_assert(strstr(msg, "forked"), "message: %s", msg);
	close(sv[0]);
	phx_device_close(dev);
}

/*
 * A child that frees what it inherited (a finalizer after fork, say) and
 * closes the device leaves the parent's buffer and device as they were:
 * on CUDA it makes no driver call on the parent's handles or context; on
 * sim it neither waits for the parent's stream threads nor gives the
 * parent's memory back.
 */
Test(buf, a_forked_child_freeing_leaves_the_parents_buffer)
{
	size_t n = 6 * MiB + 1234;
	unsigned char *data, *back;
	struct phx_device *dev;
	struct phx_buf *buf;
	int status;
	pid_t pid;

	skip_fork_beside_threads();
	data = xmalloc(n);
	back = xmalloc(n);
	fill_random(data, n, 23);
	dev = open_default();
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, data, n), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		phx_buf_free(buf);
		phx_device_close(dev);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child ended with status %d", status);
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 0, n), 0, "%s",
		     phx_strerror_last());
	cr_assert(!memcmp(back, data, n), "the parent's bytes are intact");
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(back);
}

Test(device, missing_gpu_is_reported)
{
	struct phx_device_info info;
	struct phx_device *dev;
	char why[512];

	if (phx_device_list(PHX_DEVICE_CUDA, &info, 1) > 0)
		cr_skip_test("a GPU is present");
	snprintf(why, sizeof(why), "%s", phx_strerror_last());
	cr_assert(strstr(why, "no cuda devices"), "message: %s", why);
	cr_assert_eq(phx_device_open("gpu0", &dev), -ENODEV);
	cr_assert(strstr(phx_strerror_last(), "cannot open cuda device 0"),
		  "message: %s", phx_strerror_last());
}

Test(device, bad_device_variable)
{
	struct phx_device *dev;
	const char *why;

	setenv("PHX_DEVICE", "tpu", 1);
	cr_assert_eq(phx_default_kind(&why), PHX_DEVICE_NONE);
	cr_assert_eq(phx_device_open(NULL, &dev), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "PHX_DEVICE"), "message: %s",
		  phx_strerror_last());
}

Test(buf, sparse_copy_stays_sparse)
{
	struct phx_device *dev = open_default();
	struct phx_buf *a, *b;
	char data[100];

	fill_random(data, sizeof(data), 3);
	cr_assert_eq(phx_buf_alloc(dev, 4ULL << 30, PHX_BUF_SPARSE, &a), 0);
	cr_assert_eq(phx_buf_alloc(dev, 4ULL << 30, PHX_BUF_SPARSE, &b), 0);
	cr_assert_eq(phx_memcpy_to_buf(a, 3ULL << 30, data, sizeof(data)), 0);
	cr_assert_eq(phx_memcpy_buf(b, 0, a, 0, 4ULL << 30), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_committed(b), phx_buf_committed(a),
		     "holes are not backed by the copy");
	assert_buf_eq(b, 3ULL << 30, data, sizeof(data));
	phx_buf_free(a);
	phx_buf_free(b);
	phx_device_close(dev);
}

Test(buf, host_view_and_pinning)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf;
	unsigned char *view;
	static char host[1 << 20];

	cr_assert_eq(phx_host_register(dev, host, sizeof(host)), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_alloc(dev, 64 * MiB, PHX_BUF_SPARSE, &buf), 0);
	view = phx_buf_host_view(buf);
	if (phx_device_kind(dev) == PHX_DEVICE_CUDA) {
		cr_assert_null(view);
	} else {
		cr_assert_not_null(view);
		/* never-written memory reads as zeros through the view */
		cr_assert_eq(view[40 * MiB], 0);
		cr_assert_eq(phx_buf_commit(buf, 40 * MiB, 1), 0);
		view = phx_buf_host_view(buf);
		view[40 * MiB] = 7;
		cr_assert_eq(phx_memcpy_from_buf(host, buf, 40 * MiB, 1), 0);
		cr_assert_eq(host[0], 7);
	}
	phx_buf_free(buf);
	phx_host_unregister(dev, host);
	phx_device_close(dev);
}

Test(device, address_finds_its_device)
{
	struct phx_device *d0, *d1, *found;
	struct phx_buf *b0, *b1;

	/* settings are read once, at the first call: set them first */
	setenv("PHX_SIM_DEVICES", "2", 1);
	cr_assert_eq(phx_device_open("sim0", &d0), 0);
	cr_assert_eq(phx_device_open("sim1", &d1), 0);
	cr_assert_eq(phx_device_open("sim99", &found), -ENODEV);
	cr_assert_eq(phx_buf_alloc(d0, MiB, 0, &b0), 0);
	cr_assert_eq(phx_buf_alloc(d1, MiB, 0, &b1), 0);
	cr_assert_eq(phx_device_open_dptr(PHX_DEVICE_SIM,
					  phx_buf_dptr(b1) + 4096, &found),
		     0);
	cr_assert_eq(found, d1);
	phx_device_close(found);
	cr_assert_eq(
		phx_device_open_dptr(PHX_DEVICE_SIM, phx_buf_dptr(b0), &found),
		0);
	cr_assert_eq(found, d0);
	phx_device_close(found);
	cr_assert_eq(phx_device_open_dptr(PHX_DEVICE_SIM, 4096, &found),
		     -ENODEV);
	phx_buf_free(b0);
	phx_buf_free(b1);
	phx_device_close(d0);
	phx_device_close(d1);
}

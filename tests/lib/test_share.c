/* SPDX-License-Identifier: MIT */
/*
 * test_share.c - a buffer received from phx_buf_send() holds the sender's
 * bytes where it has them and zeros in its holes, and is the same memory:
 * its runs of chunks are made accessible a run at a time, holes between.
 */
#include <sys/socket.h>

#include "util.h"

Test(share, a_sparse_buffer_arrives_whole_with_its_holes)
{
	struct phx_device *dev = open_default();
	size_t size = 256 * MiB, n = 3 * MiB + 17, far = 200 * MiB;
	unsigned char *a = xmalloc(n), *b = xmalloc(n), *got = xmalloc(n);
	struct phx_buf *buf, *recv;
	int sv[2];
	size_t i;

	fill_random(a, n, 41);
	fill_random(b, n, 42);
	cr_assert_eq(phx_buf_alloc(dev, size, PHX_BUF_SPARSE, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, a, n), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, far, b, n), 0);
	cr_assert_lt(phx_buf_committed(buf), far, "a hole between the two");
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(phx_buf_send(buf, sv[0]), 0, "%s", phx_strerror_last());
	cr_assert_eq(phx_buf_recv(dev, sv[1], &recv), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_size(recv), size);
	cr_assert_eq(phx_buf_committed(recv), phx_buf_committed(buf));

	assert_buf_eq(recv, 0, a, n);
	assert_buf_eq(recv, far, b, n);
	cr_assert_eq(phx_memcpy_from_buf(got, recv, far - n, n), 0);
	for (i = 0; i < n; i++)
		cr_assert_eq(got[i], 0, "hole byte %zu", i);

	/* the same memory: a write through one is read through the other */
	cr_assert_eq(phx_memcpy_to_buf(recv, far + 5, a, 4096), 0);
	cr_assert_eq(phx_memcpy_from_buf(got, buf, far + 5, 4096), 0);
	cr_assert_arr_eq(got, a, 4096);

	phx_buf_free(recv);
	phx_buf_free(buf);
	close(sv[0]);
	close(sv[1]);
	phx_device_close(dev);
	free(a);
	free(b);
	free(got);
}

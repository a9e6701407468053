/* SPDX-License-Identifier: MIT */
/*
 * test_args.c - bad arguments: a NULL array of transfers, unknown flags;
 * each is a negative errno with a message, and nothing is left behind.
 */
#include "util.h"

Test(args, batch_of_a_null_array_is_refused)
{
	struct phx_device *dev = open_default();
	struct phx_batch *b;

	cr_assert_eq(phx_batch_create(dev, 0, 0, &b), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_batch_submit(b, NULL, 3), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "NULL"), "%s",
		  phx_strerror_last());
	cr_assert_eq(phx_batch_queue(b, NULL, 1), -EINVAL);
	cr_assert_eq(phx_batch_submit(b, NULL, 0), 0, "nothing to start");
	cr_assert_eq(phx_batch_wait(b, 0, NULL, 0, 0), 0);
	phx_batch_destroy(b);
	phx_device_close(dev);
}

Test(args, unknown_flags_are_refused)
{
	struct phx_device *dev = open_default();
	struct phx_device_info before, after;
	struct phx_batch *b = NULL;
	struct phx_buf *buf = NULL;

	cr_assert_eq(phx_device_info(dev, &before), 0);
	cr_assert_eq(phx_buf_alloc(dev, MiB, 0xff, &buf), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "unknown buffer flags"), "%s",
		  phx_strerror_last());
	cr_assert_null(buf);
	cr_assert_eq(phx_batch_create(dev, 0, 0xff, &b), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "unknown batch flags"), "%s",
		  phx_strerror_last());
	cr_assert_null(b);
	cr_assert_eq(phx_device_info(dev, &after), 0);
	cr_assert_eq(after.used, before.used);
	/* the known ones still work */
	buf = buf_new(dev, MiB, PHX_BUF_SPARSE);
	cr_assert_eq(phx_batch_create(dev, 0, PHX_BATCH_POLL, &b), 0, "%s",
		     phx_strerror_last());
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
}

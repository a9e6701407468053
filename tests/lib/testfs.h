/* SPDX-License-Identifier: MIT */
/*
 * testfs.h - a FUSE file system of one file, served by the test's own
 * process: a file whose reads the test decides (held back, failed).
 */
#ifndef PHX_TEST_TESTFS_H
#define PHX_TEST_TESTFS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct testfs {
	/* set by the test */
	const char *name; /* the file's name in the root */
	uint64_t size;
	bool direct_io; /* every read reaches @read, none the page cache */
	/* answer a read of @size bytes at @off (fuse_reply_buf or _err) */
	void (*read)(fuse_req_t req, size_t size, off_t off);
	/* set by testfs_mount() */
	struct fuse_session *se;
	pthread_t thread;
	char dir[256];
	char path[320]; /* the file's path */
};

/*
 * Mount @fs on a new directory under dir_direct() and serve it on a
 * thread; skips the test where FUSE cannot be mounted.
 */
void testfs_mount(struct testfs *fs);
/* Unmount @fs; every descriptor of its file is closed. */
void testfs_unmount(struct testfs *fs);
/*
 * After a failed assertion (a test's .fini): detach @fs, whose file may
 * still be open, and leave the session to the process's exit.
 */
void testfs_detach(struct testfs *fs);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * ops.c - phxfs's FUSE operations (low-level API): the session's setup and
 * the table that gathers the handlers of dir.c, file.c and xattr.c.
 *
 * Regular files, directories, symlinks, hard links, FIFOs, sockets and
 * device nodes; a regular file's bytes live in one sparse device buffer.
 * Not supported (docs/phxfs.md says why): hole punching and the other
 * fallocate modes, POSIX ACLs, RENAME_WHITEOUT, atime updates (as if
 * noatime), O_TMPFILE with libfuse older than 3.17.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "phxfs.h"

static void phxfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct phxfs *fs = userdata;

	/*
	 * At most what this libfuse's request buffer holds (parse_sizes()
	 * checked): larger, and every read of /dev/fuse fails with EINVAL.
	 * libfuse asks the kernel for max_pages to match, for reads too.
	 */
	conn->max_write = (unsigned int)fs->max_write;
	conn->max_readahead = conn->max_readahead > (1u << 20) ?
				      conn->max_readahead :
				      (1u << 20);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
	/* Requests arrive in one buffer we copy from: splicing would not help. */
	phxfs_want(conn, FUSE_CAP_SPLICE_READ, false);
	phxfs_want(conn, FUSE_CAP_SPLICE_WRITE, false);
	phxfs_want(conn, FUSE_CAP_SPLICE_MOVE, false);
	if (fs->opts.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		phxfs_want(conn, FUSE_CAP_WRITEBACK_CACHE, true);
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	/*
	 * Shared mappings of direct-I/O files (Linux >= 6.6): their pages
	 * live in the page cache and dirty ones come back as WRITE requests;
	 * the kernel flushes and drops them around direct reads and writes.
	 */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		phxfs_want(conn, FUSE_CAP_DIRECT_IO_ALLOW_MMAP, true);
#endif
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		phxfs_want(conn, FUSE_CAP_ASYNC_DIO, true);
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		phxfs_want(conn, FUSE_CAP_PARALLEL_DIROPS, true);
	phxfs_backing_init(fs, conn);
	phxfs_uring_init(fs, conn);
}

static void phxfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	struct phxfs_dev *dev = NULL;
	struct statvfs st;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode)
		dev = inode->dev;
	phxfs_dev_statfs(fs, dev, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_statfs(req, &st);
}

void phxfs_ops_init(struct phxfs *fs, struct fuse_lowlevel_ops *o)
{
	memset(o, 0, sizeof(*o));
	o->init = phxfs_init;
	o->statfs = phxfs_statfs;
	phxfs_dir_ops(o);
	phxfs_attr_ops(o);
	phxfs_file_ops(fs, o);
	phxfs_xattr_ops(o);
}

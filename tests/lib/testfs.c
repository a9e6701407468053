/* SPDX-License-Identifier: MIT */
/* testfs.c - the one-file FUSE file system of testfs.h. */
#include <sys/stat.h>

#include "testfs.h"
#include "util.h"

#define TESTFS_INO 2

static void testfs_stat(const struct testfs *fs, fuse_ino_t ino,
			struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)fs->size;
	}
}

static void testfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const struct testfs *fs = fuse_req_userdata(req);
	struct fuse_entry_param e = { .ino = TESTFS_INO,
				      .attr_timeout = 3600,
				      .entry_timeout = 3600 };

	if (parent != FUSE_ROOT_ID || strcmp(name, fs->name)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	testfs_stat(fs, TESTFS_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void testfs_getattr(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	testfs_stat(fuse_req_userdata(req), ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void testfs_open(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	const struct testfs *fs = fuse_req_userdata(req);

	if (ino != TESTFS_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->direct_io = fs->direct_io;
	fi->keep_cache = !fs->direct_io;
	fuse_reply_open(req, fi);
}

static void testfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	const struct testfs *fs = fuse_req_userdata(req);

	(void)ino;
	(void)fi;
	fs->read(req, size, off);
}

static const struct fuse_lowlevel_ops testfs_ops = {
	.lookup = testfs_lookup,
	.getattr = testfs_getattr,
	.open = testfs_open,
	.read = testfs_read,
};

static void *testfs_loop(void *arg)
{
	fuse_session_loop(((struct testfs *)arg)->se);
	return NULL;
}

void testfs_mount(struct testfs *fs)
{
	char *argv[] = { "phx-testfs", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);

	if (access("/dev/fuse", R_OK | W_OK))
		cr_skip_test("/dev/fuse is not usable: %s", strerror(errno));
	snprintf(fs->dir, sizeof(fs->dir), "%s/phx-testfs-XXXXXX",
		 dir_direct());
	cr_assert_not_null(mkdtemp(fs->dir), "mkdtemp: %s", strerror(errno));
	snprintf(fs->path, sizeof(fs->path), "%s/%s", fs->dir, fs->name);
	fs->se = fuse_session_new(&args, &testfs_ops, sizeof(testfs_ops), fs);
	fuse_opt_free_args(&args);
	cr_assert_not_null(fs->se, "fuse_session_new failed");
	if (fuse_session_mount(fs->se, fs->dir)) {
		fuse_session_destroy(fs->se);
		fs->se = NULL;
		rmdir(fs->dir);
		cr_skip_test("cannot mount a FUSE file system here");
	}
	cr_assert_eq(pthread_create(&fs->thread, NULL, testfs_loop, fs), 0);
}

void testfs_unmount(struct testfs *fs)
{
	fuse_session_exit(fs->se);
	fuse_session_unmount(fs->se); /* ends the loop's read of /dev/fuse */
	pthread_join(fs->thread, NULL);
	fuse_session_destroy(fs->se);
	fs->se = NULL;
	rmdir(fs->dir);
}

void testfs_detach(struct testfs *fs)
{
	if (!fs->se)
		return;
	fuse_session_unmount(fs->se);
	rmdir(fs->dir);
}

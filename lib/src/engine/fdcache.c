/* SPDX-License-Identifier: MIT */
/*
 * fdcache.c - the files an engine's jobs read and write.
 *
 * Jobs on the same file share an entry while any of them is active.  The
 * caller's descriptor is used as it is for the mode it was opened in;
 * the other mode (O_DIRECT or the page cache) is a reopen through
 * /proc/self/fd, made on first need and closed with the entry.  A reopen
 * never opens more than the caller's descriptor allows: opening the
 * /proc link checks the file's mode bits against this process, not how
 * the descriptor was opened, so in a privileged process an O_PATH or
 * write-only descriptor would otherwise come back readable.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_i.h"

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct phx_cachestat_range {
	uint64_t off;
	uint64_t len;
};

struct phx_cachestat {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

/* May a descriptor opened with @fl (F_GETFL) be used in access mode @acc? */
static bool fd_allows(int fl, int acc)
{
	int have = fl & O_ACCMODE;

	if (fl & O_PATH)
		return false;
	return have == O_RDWR || have == acc;
}

int phx_fd_check(int fd, enum phx_op op)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return phx_err(EBADF, "fd %d is not an open file", fd);
	if (op == PHX_OP_READ && !fd_allows(fl, O_RDONLY))
		return phx_err(EBADF, "fd %d is not open for reading", fd);
	if (op == PHX_OP_WRITE && !fd_allows(fl, O_WRONLY))
		return phx_err(EBADF, "fd %d is not open for writing", fd);
	/* the kernel would put every piece at the end, not at its offset */
	if (op == PHX_OP_WRITE && (fl & O_APPEND))
		return phx_err(
			EINVAL,
			"fd %d is open with O_APPEND: writes go to an offset; open it without",
			fd);
	return fl;
}

int phx_reopen(int fd, int flags)
{
	int fl = fcntl(fd, F_GETFL);
	char path[64];

	if (fl < 0)
		return -1;
	if (!fd_allows(fl, flags & O_ACCMODE)) {
		errno = EBADF; /* as read(2) or write(2) on @fd would fail */
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, flags | O_CLOEXEC);
}

void phx_fd_put(struct phx_fd *f)
{
	if (--f->users)
		return;
	if (f->own_direct && f->direct_fd >= 0)
		close(f->direct_fd);
	if (f->own_buffered && f->buffered_fd >= 0)
		close(f->buffered_fd);
	memset(f, 0, sizeof(*f));
}

/* The bytes behind @fd (stat in @st): a regular file or a block device. */
static int stat_size(int fd, const struct stat *st, uint64_t *size)
{
	if (S_ISREG(st->st_mode)) {
		*size = (uint64_t)st->st_size;
		return 0;
	}
	if (!S_ISBLK(st->st_mode))
		return phx_err(EINVAL,
			       "fd %d is not a regular file or block device",
			       fd);
	if (ioctl(fd, BLKGETSIZE64, size))
		return phx_err(errno, "fd %d: cannot size the block device: %s",
			       fd, strerror(errno));
	return 0;
}

int phx_fd_size(int fd, uint64_t *size)
{
	struct stat st;

	if (fstat(fd, &st))
		return phx_err(EBADF, "fd %d is not an open file", fd);
	return stat_size(fd, &st, size);
}

/*
 * The entry of a job still active on @fd, if @op may use it.  Its caller
 * keeps @fd open until that job completes, so @fd is still the file the
 * entry was made for: the next small transfer on it costs no system call.
 */
static struct phx_fd *fd_active(struct phx_fd *cache, int fd, enum phx_op op)
{
	for (int i = 0; i < PHX_FD_CACHE; i++) {
		struct phx_fd *f = &cache[i];

		if (f->users && f->user_fd == fd &&
		    f->accmode != (op == PHX_OP_READ ? O_WRONLY : O_RDONLY))
			return f;
	}
	return NULL;
}

int phx_fd_get(struct phx_fd *cache, int fd, enum phx_op op,
	       struct phx_fd **out)
{
	struct phx_fd *f, *free_slot = NULL;
	struct stat st;
	int fl, acc, i, ret;
	uint64_t size;

	f = fd_active(cache, fd, op);
	if (f) {
		f->users++;
		*out = f;
		return 0;
	}
	fl = phx_fd_check(fd, op);
	if (fl < 0)
		return fl;
	if (fstat(fd, &st))
		return phx_err(EBADF, "fd %d is not an open file", fd);
	acc = fl & O_ACCMODE;
	ret = stat_size(fd, &st, &size);
	if (ret)
		return ret;

	for (i = 0; i < PHX_FD_CACHE; i++) {
		f = &cache[i];
		if (!f->users) {
			free_slot = free_slot ? free_slot : f;
			continue;
		}
		if (f->user_fd == fd && f->st_dev == st.st_dev &&
		    f->st_ino == st.st_ino && f->accmode == acc) {
			f->users++;
			f->size = size;
			*out = f;
			return 0;
		}
	}
	if (!free_slot)
		return -EAGAIN; /* caller runs the engine and retries */
	f = free_slot;
	memset(f, 0, sizeof(*f));
	f->user_fd = fd;
	f->st_dev = st.st_dev;
	f->st_ino = st.st_ino;
	f->accmode = acc;
	f->size = size;
	f->users = 1;
	if (fl & O_DIRECT) {
		f->direct_fd = fd;
		f->buffered_fd = -1;
	} else {
		f->direct_fd = -1;
		f->buffered_fd = fd;
	}
	*out = f;
	return 0;
}

/* Per-file descriptors for each mode, opened on first need. */
int phx_fd_direct(struct phx_fd *f)
{
	if (f->direct_fd == -1) {
		/* the caller's access mode, never more (phx_reopen) */
		f->direct_fd = phx_reopen(f->user_fd, f->accmode | O_DIRECT);
		if (f->direct_fd < 0)
			f->direct_fd = -2;
		else
			f->own_direct = true;
	}
	return f->direct_fd;
}

int phx_fd_buffered(struct phx_fd *f)
{
	if (f->buffered_fd == -1) {
		f->buffered_fd = phx_reopen(f->user_fd, f->accmode);
		if (f->buffered_fd < 0)
			return phx_err(
				errno,
				"fd %d: cannot reopen it without O_DIRECT for an unaligned edge: %s",
				f->user_fd, strerror(errno));
		f->own_buffered = true;
	}
	return f->buffered_fd;
}

/* Share of [off, off + len) of @fd in the page cache, in percent. */
unsigned int phx_cached_percent(int fd, uint64_t off, uint64_t len)
{
	struct phx_cachestat_range r = { off, len };
	struct phx_cachestat cs;
	uint64_t pages = (len + PHX_PAGE - 1) / PHX_PAGE;

	if (!pages || syscall(__NR_cachestat, fd, &r, &cs, 0))
		return 0;
	return (unsigned int)phx_min(100, cs.nr_cache * 100 / pages);
}

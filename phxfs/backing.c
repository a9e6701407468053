/* SPDX-License-Identifier: MIT */
/*
 * backing.c - FUSE passthrough: files on phx.ko devices are served by the
 * kernel from a phx.ko range file.
 *
 * On a kmod device, a file's bytes live in one PHX_ALLOC_GROW allocation
 * of phx.ko: a regular file whose size is the file's and whose capacity is
 * the allocation.  open() registers it with the kernel
 * (fuse_passthrough_open), so read, write, splice and mmap go to the
 * module without a request to this daemon; a mapping of the file maps the
 * device's pages.  The kernel keeps the size in the range file, so
 * getattr asks it (fstat).
 *
 * Growth: an allocation cannot grow in place.  A file opened for writing
 * gets room for its size plus the headroom (-o headroom=, at most half the
 * device memory still free); writes past that fail with EFBIG while it is
 * open in passthrough mode.  When no open file and no mapping uses the
 * range, growing it (open, truncate, phx cp) moves the bytes to a larger
 * allocation; when the last passthrough open closes, the capacity past the
 * size is given back (PHX_IOC_TRIM).  Memory is freed when the last name,
 * open file and mapping are gone: the kernel holds the range file for
 * open files and mappings, the daemon for names.
 *
 * Not done: files on such devices cannot be shared over the control
 * socket (map the file instead) nor moved to another device (EXDEV: mv
 * copies).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "phxfs.h"
#include "../kmod/phx_uapi.h"

#define PAGE_ROUND(x) (((x) + 4095) & ~4095ULL)

static atomic_bool backing_said;

void phxfs_backing_off(struct phxfs *fs, const char *fmt, ...)
{
	va_list ap;
	bool was = fs->passthrough;

	fs->passthrough = false;
	if (atomic_exchange(&backing_said, true) && !was)
		return;
	va_start(ap, fmt);
	vsnprintf(fs->passthrough_why, sizeof(fs->passthrough_why), fmt, ap);
	va_end(ap);
	fprintf(stderr,
		"phxfs: FUSE passthrough off, the daemon serves files: %s\n",
		fs->passthrough_why);
}

/* Is CAP_SYS_ADMIN in our effective set?  (FUSE_DEV_IOC_BACKING_OPEN) */
static bool have_sys_admin(void)
{
	char line[256];
	unsigned long long caps = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return geteuid() == 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return caps & (1ULL << 21);
}

void phxfs_backing_setup(struct phxfs *fs)
{
	unsigned int i, n = 0;

	for (i = 0; i < fs->ndevs; i++)
		fs->devs[i].backing_fd = -1;
	if (!PHXFS_HAVE_PASSTHROUGH) {
		phxfs_backing_off(fs, "built with libfuse %d.%d (needs 3.17)",
				  FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
		return;
	}
	if (fs->opts.writeback) {
		phxfs_backing_off(fs, "-o writeback asks for the page cache");
		return;
	}
	if (!have_sys_admin()) {
		phxfs_backing_off(fs, "no CAP_SYS_ADMIN (run phxfs as root)");
		return;
	}
	for (i = 0; i < fs->ndevs; i++) {
		struct phxfs_dev *d = &fs->devs[i];
		char path[32];

		if (d->kind != PHX_DEVICE_KMOD)
			continue;
		snprintf(path, sizeof(path), "/dev/%s", d->name);
		d->backing_fd = open(path, O_RDWR | O_CLOEXEC);
		if (d->backing_fd < 0)
			fprintf(stderr,
				"phxfs: %s: %s; its files are served by the daemon\n",
				path, strerror(errno));
		else
			n++;
	}
	if (!n) {
		phxfs_backing_off(fs, "no phx.ko device (kind=%s)",
				  fs->ndevs ? phx_kind_name(fs->devs[0].kind) :
					      "none");
		return;
	}
	fs->passthrough = true; /* unless the kernel says no in init */
}

void phxfs_backing_init(struct phxfs *fs, struct fuse_conn_info *conn)
{
	if (!fs->passthrough)
		return;
#if PHXFS_HAVE_PASSTHROUGH
	if (conn->capable & FUSE_CAP_PASSTHROUGH) {
		phxfs_want(conn, FUSE_CAP_PASSTHROUGH, true);
		/* The range files sit on no stacked file system. */
		conn->max_backing_stack_depth = 1;
		return;
	}
#endif
	phxfs_backing_off(
		fs,
		"the kernel has no FUSE passthrough (needs Linux 6.9 with CONFIG_FUSE_PASSTHROUGH)");
}

void phxfs_backing_close(struct phxfs *fs)
{
	unsigned int i;

	for (i = 0; i < fs->ndevs; i++) {
		if (fs->devs[i].backing_fd >= 0)
			close(fs->devs[i].backing_fd);
		fs->devs[i].backing_fd = -1;
	}
}

const char *phxfs_path_name(int path)
{
	if (path == PHXFS_PATH_PASSTHROUGH)
		return "passthrough";
	return phx_path_name((enum phx_path)path);
}

/* Device memory that new allocations may still take. */
static uint64_t dev_room(struct phxfs_dev *d)
{
	struct phx_ioc_info info;

	if (ioctl(d->backing_fd, PHX_IOC_INFO, &info))
		return 0;
	return info.free > d->reserve ? info.free - d->reserve : 0;
}

static int range_alloc(struct phxfs_dev *d, uint64_t cap, int *fd)
{
	struct phx_ioc_alloc req = { .size = cap, .flags = PHX_ALLOC_GROW };

	if (cap > dev_room(d))
		return -ENOSPC;
	if (ioctl(d->backing_fd, PHX_IOC_ALLOC, &req))
		return -errno;
	*fd = req.fd;
	return 0;
}

static bool range_mapped(int fd)
{
	struct phx_ioc_range r;

	return !ioctl(fd, PHX_IOC_RANGE, &r) && (r.flags & PHX_RANGE_MAPPED);
}

/* Copy the first @len bytes of range @from into range @to. */
static int range_copy(int from, int to, uint64_t len)
{
	void *src, *dst;

	if (!len)
		return 0;
	src = mmap(NULL, len, PROT_READ, MAP_SHARED, from, 0);
	if (src == MAP_FAILED)
		return -errno;
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, to, 0);
	if (dst == MAP_FAILED) {
		munmap(src, len);
		return -errno;
	}
	memcpy(dst, src, len);
	munmap(dst, len);
	munmap(src, len);
	return 0;
}

uint64_t phxfs_data_size(struct phxfs_inode *inode)
{
	int fd = inode->range_fd;
	struct stat st;

	if (fd >= 0 && !fstat(fd, &st))
		return (uint64_t)st.st_size;
	return atomic_load(&inode->size);
}

uint64_t phxfs_data_held(struct phxfs_inode *inode)
{
	if (phxfs_ranged(inode))
		return inode->range_cap;
	return inode->buf ? phx_buf_committed(inode->buf) : 0;
}

int phxfs_range_reserve(struct phxfs_inode *inode, uint64_t need, uint64_t want)
{
	struct phxfs_dev *d = inode->dev;
	bool ranged = phxfs_ranged(inode);
	uint64_t size = phxfs_data_size(inode), cap, room;
	int fd, ret;

	if (need > PHXFS_MAX_FILE)
		return -EFBIG;
	if (want < need)
		want = need;
	if (ranged && inode->range_cap >= want)
		return 0;
	/* Open files and mappings hold the old range: it must stay. */
	if (ranged && (inode->npass || range_mapped(inode->range_fd)))
		return inode->range_cap >= need ? 0 : -EFBIG;
	room = dev_room(d);
	if (want - need > room / 2)
		want = need + room / 2;
	cap = PAGE_ROUND(want > 4096 ? want : 4096);
	ret = range_alloc(d, cap, &fd);
	if (ret == -ENOSPC && cap > PAGE_ROUND(need) && PAGE_ROUND(need)) {
		cap = PAGE_ROUND(need);
		ret = range_alloc(d, cap, &fd);
	}
	if (ret)
		return ranged && inode->range_cap >= need ? 0 : ret;
	if (ranged) {
		ret = ftruncate(fd, (off_t)size) ? -errno : 0;
		if (!ret)
			ret = range_copy(inode->range_fd, fd, size);
		/* Same descriptor number: getattr reads it without io_lock. */
		if (!ret && dup3(fd, inode->range_fd, O_CLOEXEC) < 0)
			ret = -errno;
		close(fd);
		if (ret)
			return ret;
	} else {
		atomic_fetch_add(&d->files, 1);
		inode->range_fd = fd;
	}
	inode->range_cap = cap;
	return 0;
}

int phxfs_range_set_size(struct phxfs_inode *inode, uint64_t size)
{
	int ret = phxfs_range_reserve(inode, size, size);

	if (!ret && ftruncate(inode->range_fd, (off_t)size))
		ret = -errno;
	if (!ret)
		atomic_store(&inode->size, size);
	return ret;
}

void phxfs_range_trim(struct phxfs_inode *inode)
{
	struct phx_ioc_range r;

	if (!phxfs_ranged(inode) || inode->npass)
		return;
	/* EBUSY (I/O still pins pages): keep the room until next time. */
	if (!ioctl(inode->range_fd, PHX_IOC_TRIM) &&
	    !ioctl(inode->range_fd, PHX_IOC_RANGE, &r))
		inode->range_cap = r.size;
}

void phxfs_range_free(struct phxfs_inode *inode)
{
	if (!phxfs_ranged(inode))
		return;
	/* The kernel's open files and mappings keep their own reference. */
	close(inode->range_fd);
	inode->range_fd = -1;
	inode->range_cap = 0;
	atomic_fetch_sub(&inode->dev->files, 1);
}

bool phxfs_passthrough_open(struct phxfs *fs, fuse_req_t req,
			    struct phxfs_inode *inode,
			    struct fuse_file_info *fi)
{
#if PHXFS_HAVE_PASSTHROUGH
	if (!fs->passthrough || !phxfs_ranged(inode))
		return false;
	if (!inode->backing_id) {
		inode->backing_id = fuse_passthrough_open(req, inode->range_fd);
		if (inode->backing_id <= 0) {
			inode->backing_id = 0;
			phxfs_backing_off(
				fs, "the kernel refused a backing file: %s",
				strerror(errno));
			return false;
		}
	}
	fi->backing_id = inode->backing_id;
	fi->direct_io = 0; /* it would override passthrough */
	fi->keep_cache = 0;
	inode->npass++;
	atomic_store(&inode->path, PHXFS_PATH_PASSTHROUGH);
	return true;
#else
	return false;
#endif
}

void phxfs_passthrough_release(struct phxfs *fs, fuse_req_t req,
			       struct phxfs_inode *inode)
{
	if (!inode->npass || --inode->npass)
		return;
#if PHXFS_HAVE_PASSTHROUGH
	fuse_passthrough_close(req, inode->backing_id);
#endif
	inode->backing_id = 0;
	phxfs_range_trim(inode);
}

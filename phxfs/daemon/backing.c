/* SPDX-License-Identifier: MIT */
/*
 * backing.c - FUSE passthrough: files on phx.ko devices are served by the
 * kernel from a backing file of libphoenix (phx_backing_*).
 *
 * On a kmod device, a file's bytes live in one backing file: device
 * memory handed out as a regular file whose size is the file's and whose
 * capacity is the allocation.  open() registers it with the kernel
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
 * size is given back (phx_backing_trim).  Memory is freed when the last name,
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
#include <sys/stat.h>
#include <unistd.h>

#include "phxfs.h"

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
		fs->devs[i].backing = false;
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
		struct phx_backing *probe;
		int ret;

		/* the simulated device's backing files are memfds: no gain */
		if (d->kind != PHX_DEVICE_KMOD)
			continue;
		ret = phx_backing_alloc(d->dev, 4096, &probe);
		if (ret) {
			fprintf(stderr,
				"phxfs: %s: no backing files (%s); its files are served by the daemon\n",
				d->name, phx_strerror_last());
			continue;
		}
		phx_backing_free(probe);
		d->backing = true;
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

	for (i = 0; i < fs->ndevs; i++)
		fs->devs[i].backing = false;
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
	struct phx_device_info info;
	uint64_t room;

	if (phx_device_info(d->dev, &info))
		return 0;
	room = info.free > d->reserve ? info.free - d->reserve : 0;
	if (d->limit) {
		uint64_t left = d->limit > info.used ? d->limit - info.used : 0;

		if (left < room)
			room = left;
	}
	return room;
}

static bool range_mapped(struct phxfs_inode *inode)
{
	struct phx_backing_info info;

	return !phx_backing_info(inode->backing, &info) && info.mapped;
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

int phxfs_data_next(struct phxfs_inode *inode, uint64_t off, uint64_t *data_off,
		    uint64_t *data_len)
{
	uint64_t size = phxfs_data_size(inode);

	if (off >= size)
		return -ENXIO;
	if (phxfs_ranged(inode)) {
		*data_off = off;
		*data_len = size - off;
		return 0;
	}
	if (!inode->buf)
		return -ENXIO;
	return phx_buf_next_data(inode->buf, off, data_off, data_len);
}

int phxfs_range_reserve(struct phxfs_inode *inode, uint64_t need, uint64_t want)
{
	struct phxfs_dev *d = inode->dev;
	bool ranged = phxfs_ranged(inode);
	uint64_t cap, room;
	int ret;

	if (need > PHXFS_MAX_FILE)
		return -EFBIG;
	if (want < need)
		want = need;
	if (ranged && inode->range_cap >= want)
		return 0;
	/* Open files and mappings hold the old memory: it must stay. */
	if (ranged && (inode->npass || range_mapped(inode)))
		return inode->range_cap >= need ? 0 : -EFBIG;
	room = dev_room(d);
	if (want - need > room / 2)
		want = need + room / 2;
	cap = PAGE_ROUND(want > 4096 ? want : 4096);
	if (!ranged) {
		ret = phx_backing_alloc(d->dev, cap, &inode->backing);
		if (ret == -ENOSPC && cap > PAGE_ROUND(need) &&
		    PAGE_ROUND(need)) {
			cap = PAGE_ROUND(need);
			ret = phx_backing_alloc(d->dev, cap, &inode->backing);
		}
		if (ret)
			return ret;
		atomic_fetch_add(&d->files, 1);
		/* Its number never changes: getattr fstat()s it unlocked. */
		inode->range_fd = phx_backing_fd(inode->backing);
	} else {
		/* The bytes move through the engine; the number stays. */
		ret = phx_backing_reserve(inode->backing, cap);
		if (ret == -ENOSPC && cap > PAGE_ROUND(need)) {
			cap = PAGE_ROUND(need);
			ret = phx_backing_reserve(inode->backing, cap);
		}
		if (ret)
			return inode->range_cap >= need ? 0 : ret;
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
	struct phx_backing_info info;

	if (!phxfs_ranged(inode) || inode->npass)
		return;
	/* Room that I/O still pins stays until next time. */
	if (!phx_backing_trim(inode->backing) &&
	    !phx_backing_info(inode->backing, &info))
		inode->range_cap = info.capacity;
}

void phxfs_range_free(struct phxfs_inode *inode)
{
	if (!phxfs_ranged(inode))
		return;
	/* The kernel's open files and mappings keep their own reference. */
	phx_backing_free(inode->backing);
	inode->backing = NULL;
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

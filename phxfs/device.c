/* SPDX-License-Identifier: MIT */
/* device.c - phxfs's glue to libphoenix: devices, statfs, file buffers. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "phxfs.h"

static int kind_of(const char *s, enum phx_device_kind *out)
{
	static const struct {
		const char *name;
		enum phx_device_kind kind;
	} kinds[] = {
		{ "cuda", PHX_DEVICE_CUDA }, { "gpu", PHX_DEVICE_CUDA },
		{ "sim", PHX_DEVICE_SIM },   { "kmod", PHX_DEVICE_KMOD },
		{ "auto", PHX_DEVICE_NONE },
	};
	unsigned int i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (!strcmp(s, kinds[i].name)) {
			*out = kinds[i].kind;
			return 0;
		}
	}
	return -EINVAL;
}

static int dev_add(struct phxfs *fs, const struct phx_device_info *info)
{
	struct phxfs_dev *d = &fs->devs[fs->ndevs];
	int ret;

	d->backing = false;
	ret = phx_device_open(info->name, &d->dev);
	if (ret) {
		fprintf(stderr, "phxfs: %s\n", phx_strerror_last());
		return ret;
	}
	memcpy(d->name, info->name, sizeof(d->name));
	d->name[sizeof(d->name) - 1] = '\0';
	d->kind = info->kind;
	if (fs->reserve >= info->capacity) {
		fprintf(stderr,
			"phxfs: %s: reserve=%llu is not below its capacity %llu; lower it\n",
			d->name, (unsigned long long)fs->reserve,
			(unsigned long long)info->capacity);
		ret = -EINVAL;
		goto out_close;
	}
	d->reserve = fs->reserve;
	d->limit = info->capacity - fs->reserve;
	if (fs->size && fs->size < d->limit)
		d->limit = fs->size;
	d->root_reserve = fs->root_reserve_pct ?
				  d->limit / 100 * fs->root_reserve_pct :
				  fs->root_reserve;
	if (d->root_reserve >= d->limit) {
		fprintf(stderr,
			"phxfs: %s: root_reserve=%s is not below the %llu bytes phxfs may use there; lower it\n",
			d->name, fs->opts.root_reserve,
			(unsigned long long)d->limit);
		ret = -EINVAL;
		goto out_close;
	}
	ret = phx_device_set_limit(d->dev, d->limit);
	if (ret) {
		fprintf(stderr, "phxfs: %s\n", phx_strerror_last());
		goto out_close;
	}
	d->root = phxfs_inode_new(fs, d, S_IFDIR | 01777, 0, 0);
	if (!d->root) {
		ret = -ENOMEM;
		goto out_close;
	}
	d->root->nlookup = 1; /* device directories live as long as we do */
	ret = phxfs_dentry_add(fs, fs->root, d->name, d->root);
	if (ret)
		goto out_close;
	fs->ndevs++;
	return 0;

out_close:
	phx_device_close(d->dev);
	d->dev = NULL;
	return ret;
}

int phxfs_devices_open(struct phxfs *fs)
{
	struct phx_device_info infos[PHXFS_MAX_DEVICES];
	enum phx_device_kind kind = PHX_DEVICE_NONE;
	const char *why = NULL;
	int n, i, ret;

	if (fs->opts.kind && kind_of(fs->opts.kind, &kind)) {
		fprintf(stderr,
			"phxfs: unknown device kind '%s'; use kind=cuda, sim or kmod\n",
			fs->opts.kind);
		return -EINVAL;
	}
	if (kind == PHX_DEVICE_NONE)
		kind = phx_default_kind(&why);
	n = phx_device_list(kind, infos, PHXFS_MAX_DEVICES);
	if (n <= 0) {
		fprintf(stderr, "phxfs: no %s devices: %s\n",
			phx_kind_name(kind),
			n < 0 ? phx_strerror_last() : "none found");
		return n < 0 ? n : -ENODEV;
	}
	if (n > PHXFS_MAX_DEVICES)
		n = PHXFS_MAX_DEVICES;
	pthread_mutex_lock(&fs->lock);
	for (i = 0, ret = 0; i < n && !ret; i++)
		ret = dev_add(fs, &infos[i]);
	pthread_mutex_unlock(&fs->lock);
	return ret;
}

void phxfs_devices_close(struct phxfs *fs)
{
	unsigned int i;

	for (i = 0; i < fs->ndevs; i++)
		phx_device_close(fs->devs[i].dev);
	fs->ndevs = 0;
}

/* statfs of one device, or of all of them when @dev is NULL. */
void phxfs_dev_statfs(struct phxfs *fs, struct phxfs_dev *dev,
		      struct statvfs *st)
{
	uint64_t cap = 0, used = 0, files = 0;
	unsigned int i;

	for (i = 0; i < fs->ndevs; i++) {
		struct phxfs_dev *d = &fs->devs[i];
		struct phx_device_info info;

		if (dev && dev != d)
			continue;
		if (phx_device_info(d->dev, &info))
			continue;
		cap += info.capacity;
		used += info.used < info.capacity ? info.used : info.capacity;
		files += atomic_load(&d->files);
	}
	memset(st, 0, sizeof(*st));
	st->f_bsize = 4096;
	st->f_frsize = 4096;
	st->f_blocks = cap / 4096;
	st->f_bfree = (cap - used) / 4096;
	st->f_bavail = st->f_bfree;
	/* nr_inodes counts inodes and names alike (hard links cost one) */
	st->f_files = fs->nr_inodes;
	st->f_ffree = fs->nr_inodes -
		      (fs->ninodes > fs->nentries ? fs->ninodes : fs->nentries);
	st->f_favail = st->f_ffree;
	st->f_namemax = PHXFS_NAME_MAX;
	(void)files;
}

int phxfs_room_for(struct phxfs_inode *inode, uid_t uid, uint64_t off,
		   uint64_t len)
{
	struct phxfs_dev *d = inode->dev;
	struct phx_device_info info;
	uint64_t doff, dlen;

	if (!uid || !len || !d->root_reserve || phxfs_dev_ranged(d))
		return 0;
	/* stored bytes are overwritten in place: they take nothing more */
	if (inode->buf && !phx_buf_next_data(inode->buf, off, &doff, &dlen) &&
	    doff <= off && doff + dlen >= off + len)
		return 0;
	if (phx_device_info(d->dev, &info))
		return 0;
	return info.used + len > d->limit - d->root_reserve ? -ENOSPC : 0;
}

bool phxfs_in_reserve(struct phxfs_inode *inode, uid_t uid)
{
	struct phxfs_dev *d = inode->dev;
	struct phx_device_info info;

	if (!uid || !d->root_reserve || phxfs_dev_ranged(d) ||
	    phx_device_info(d->dev, &info))
		return false;
	return info.used > d->limit - d->root_reserve;
}

int phxfs_data_resize(struct phxfs_inode *inode, uint64_t size)
{
	int ret;

	if (size > PHXFS_MAX_FILE)
		return -EFBIG;
	if (phxfs_dev_ranged(inode->dev))
		return phxfs_range_set_size(inode, size);
	if (!inode->buf) {
		if (!size)
			goto out;
		ret = phx_buf_alloc(inode->dev->dev, size, PHX_BUF_SPARSE,
				    &inode->buf);
		if (ret)
			return ret;
		atomic_fetch_add(&inode->dev->files, 1);
	} else {
		ret = phx_buf_resize(inode->buf, size);
		if (ret)
			return ret;
	}
out:
	atomic_store(&inode->size, size);
	phxfs_data_changed(inode);
	return 0;
}

int phxfs_data_ensure(struct phxfs_inode *inode)
{
	int ret;

	if (phxfs_dev_ranged(inode->dev))
		return phxfs_range_reserve(inode, 0, 0);
	if (inode->buf)
		return 0;
	ret = phx_buf_alloc(inode->dev->dev, 0, PHX_BUF_SPARSE, &inode->buf);
	if (!ret)
		atomic_fetch_add(&inode->dev->files, 1);
	return ret;
}

int phxfs_data_move(struct phxfs_inode *inode, struct phxfs_dev *to)
{
	uint64_t size = atomic_load(&inode->size);
	struct phx_buf *nb;
	int ret;

	/* Range files are the kernel's too: mv copies them itself. */
	if (phxfs_ranged(inode) || phxfs_dev_ranged(to))
		return -EXDEV;
	if (!inode->buf) {
		inode->dev = to;
		phxfs_data_changed(inode);
		return 0;
	}
	ret = phx_buf_alloc(to->dev, size, PHX_BUF_SPARSE, &nb);
	if (ret)
		return ret;
	ret = phx_memcpy_buf(nb, 0, inode->buf, 0, size);
	if (ret) {
		phx_buf_free(nb);
		return ret;
	}
	phx_buf_free(inode->buf);
	atomic_fetch_sub(&inode->dev->files, 1);
	atomic_fetch_add(&to->files, 1);
	inode->buf = nb;
	inode->dev = to;
	phxfs_data_changed(inode);
	return 0;
}

void phxfs_data_free(struct phxfs_inode *inode)
{
	if (phxfs_ranged(inode)) {
		pthread_rwlock_wrlock(&inode->io_lock);
		phxfs_range_free(inode);
		pthread_rwlock_unlock(&inode->io_lock);
		return;
	}
	if (!inode->buf)
		return;
	pthread_rwlock_wrlock(&inode->io_lock);
	phx_buf_free(inode->buf);
	inode->buf = NULL;
	atomic_fetch_sub(&inode->dev->files, 1);
	phxfs_data_changed(inode);
	pthread_rwlock_unlock(&inode->io_lock);
}

/* SPDX-License-Identifier: MIT */
/* device.c - phxfs's devices: one top-level directory each, and statfs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "phxfs.h"

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
	/*
	 * The staging the open started pinning is part of what the daemon
	 * holds at rest: have it before the first request, so the first
	 * phx cp does not wait for it and the daemon's memory does not grow
	 * under a user's requests.  Without it transfers pin their own.
	 */
	phx_device_prepare(d->dev);
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

	if (fs->opts.kind && phx_kind_parse(fs->opts.kind, &kind)) {
		fprintf(stderr, "phxfs: -o kind=%s: %s\n", fs->opts.kind,
			phx_strerror_last());
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
	uint64_t cap = 0, used = 0, avail = 0, files = 0;
	unsigned int i;

	for (i = 0; i < fs->ndevs; i++) {
		struct phxfs_dev *d = &fs->devs[i];
		struct phx_device_info info;

		if (dev && dev != d)
			continue;
		if (phx_device_info(d->dev, &info))
			continue;
		uint64_t u =
			info.used < info.capacity ? info.used : info.capacity;
		/* what users other than root may still fill, as on ext4 */
		uint64_t top = info.capacity;

		if (d->root_reserve && !phxfs_dev_ranged(d) &&
		    d->limit - d->root_reserve < top)
			top = d->limit - d->root_reserve;
		cap += info.capacity;
		used += u;
		avail += top > u ? top - u : 0;
		files += atomic_load(&d->files);
	}
	memset(st, 0, sizeof(*st));
	st->f_bsize = 4096;
	st->f_frsize = 4096;
	st->f_blocks = cap / 4096;
	st->f_bfree = (cap - used) / 4096;
	st->f_bavail = avail / 4096;
	/* nr_inodes counts inodes and names alike (hard links cost one) */
	st->f_files = fs->nr_inodes;
	st->f_ffree = fs->nr_inodes -
		      (fs->ninodes > fs->nentries ? fs->ninodes : fs->nentries);
	st->f_favail = st->f_ffree;
	st->f_namemax = PHXFS_NAME_MAX;
	(void)files;
}

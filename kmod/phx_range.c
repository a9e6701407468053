// SPDX-License-Identifier: GPL-2.0
/*
 * phx_range.c - the regular files through which userspace holds device memory.
 *
 * Each allocation (or imported dma-buf) becomes a file on a small internal
 * pseudo filesystem.  The file is a regular file (S_IFREG), because FUSE
 * passthrough only accepts regular backing files; its size is the size of
 * the allocation, or, for PHX_ALLOC_GROW files, its own (written bytes or
 * ftruncate) up to the allocation.  mmap() inserts the device's
 * ZONE_DEVICE pages into the caller's page tables, so O_DIRECT I/O into
 * such a mapping is DMA straight into device memory; read_iter/write_iter
 * copy through the kernel's direct map of those pages (phx_range_io.c).
 * The memory is given back when the inode goes away (last close and last
 * munmap), but only once no page is pinned by I/O still in flight: such
 * ranges wait on a pending list.
 *
 * Unloading: the filesystem type is owned by the module, and a superblock
 * holds its type's module until it is destroyed, after its last inode.
 * The mount that makes the superblock is pinned once per range file and
 * unpinned by the file's eviction; the file being released still holds
 * the mount then, and drops it only after the eviction has returned.  So
 * the module cannot go while its eviction code may still run, and nothing
 * holds it once every range file is gone.
 *
 * The file holds no page cache and never writes anything back: fsync has
 * nothing to do.  A GROW file keeps every byte past its size zero, except
 * in the page that holds the end (a mapping may write there), which is
 * cleared when the size moves over it: growing never reveals old data.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/falloc.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/pseudo_fs.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/uio.h>

#include "phx.h"

#define PHX_FS_MAGIC 0x70687866
/* Most pages one fault inserts: 16 MiB, bounds the time @lock is held. */
#define PHX_FAULT_BATCH 4096UL

static struct file_system_type phx_fs_type;
/* Mounted while some range file exists: one pin (phx_mnt_count) each. */
static struct vfsmount *phx_mnt;
static int phx_mnt_count;

/**
 * phx_range_pinned() - whether some page of @range is referenced by others.
 * @range: the range.
 *
 * A ZONE_DEVICE page of type MEMORY_DEVICE_GENERIC idles with a reference
 * count of one; mappings and I/O pins (GUP) add to it.
 *
 * Context: @range->phx->ranges_lock held.
 *
 * Return: true while a page of @range is mapped or pinned.
 */
bool phx_range_pinned(const struct phx_range *range)
{
	unsigned long i;

	lockdep_assert_held(&range->phx->ranges_lock);
	for (i = 0; i < range->nr_pages; i++)
		if (page_ref_count(range->pages[i]) > 1)
			return true;
	return false;
}

/**
 * phx_range_create() - allocate the bookkeeping of a range.
 * @phx: the device; the range takes a reference.
 * @nr_pages: number of pages; the caller fills in @range->pages.
 * @ops: how the memory is given back.
 *
 * Return: the range or NULL when out of memory.
 */
struct phx_range *phx_range_create(struct phx_dev *phx, unsigned long nr_pages,
				   const struct phx_range_ops *ops)
{
	struct phx_range *range;

	range = kzalloc(sizeof(*range), GFP_KERNEL);
	if (!range)
		return NULL;
	range->pages = kvcalloc(nr_pages, sizeof(*range->pages), GFP_KERNEL);
	if (!range->pages) {
		kfree(range);
		return NULL;
	}
	range->nr_pages = nr_pages;
	range->ops = ops;
	range->phx = phx;
	INIT_LIST_HEAD(&range->node);
	kref_get(&phx->kref);
	return range;
}

/**
 * phx_range_track() - put a range on its device's list of live ranges.
 * @range: a range that is on no list.
 *
 * From then on phx_dev_kill() gives back its memory, if it has any.
 */
void phx_range_track(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;

	mutex_lock(&phx->ranges_lock);
	list_add_tail(&range->node, &phx->ranges);
	mutex_unlock(&phx->ranges_lock);
}

/**
 * phx_range_destroy() - take a range off its list and free it.
 * @range: the range; its memory is released first unless already done.
 */
void phx_range_destroy(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;

	mutex_lock(&phx->ranges_lock);
	list_del_init(&range->node);
	mutex_unlock(&phx->ranges_lock);
	if (!range->released)
		range->ops->release(range);
	kvfree(range->pages);
	kfree(range);
	phx_dev_put(phx);
}

/**
 * phx_range_zap() - remove every user mapping of @range.
 * @range: a range whose file exists.
 *
 * Later accesses fault, and the fault handler refuses them once the
 * device or the range is dead.
 */
void phx_range_zap(struct phx_range *range)
{
	unmap_mapping_range(range->inode->i_mapping, 0, 0, 1);
}

/**
 * phx_dev_reap() - free closed ranges whose pages are no longer pinned.
 * @phx: the device.
 *
 * Reschedules itself while some pending range is still pinned.
 */
void phx_dev_reap(struct phx_dev *phx)
{
	struct phx_range *range, *tmp;
	LIST_HEAD(done);
	bool again;

	mutex_lock(&phx->ranges_lock);
	list_for_each_entry_safe(range, tmp, &phx->pending, node) {
		if (phx_range_pinned(range))
			continue;
		list_move(&range->node, &done);
	}
	again = !list_empty(&phx->pending);
	mutex_unlock(&phx->ranges_lock);

	list_for_each_entry_safe(range, tmp, &done, node) {
		list_del_init(&range->node);
		phx_range_destroy(range);
	}
	if (again)
		schedule_delayed_work(&phx->reap_work, msecs_to_jiffies(50));
}

/* The inode owns the range: its eviction is the range's last close. */
static void phx_range_final(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;

	mutex_lock(&phx->ranges_lock);
	list_del_init(&range->node);
	if (!range->released) {
		/* O_DIRECT I/O from an unmapped buffer may be in flight. */
		if (phx_range_pinned(range)) {
			list_add_tail(&range->node, &phx->pending);
			mutex_unlock(&phx->ranges_lock);
			schedule_delayed_work(&phx->reap_work,
					      msecs_to_jiffies(50));
			return;
		}
		/*
		 * Off the list, the range is no longer phx_dev_kill()'s to
		 * give back: give it back before the lock goes, while the
		 * device's pages are sure to exist.
		 */
		range->ops->release(range);
		range->released = true;
	}
	mutex_unlock(&phx->ranges_lock);
	phx_range_destroy(range);
}

static int phx_range_open(struct inode *inode, struct file *file)
{
	struct phx_range *range = inode->i_private;
	int ret = 0;

	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked)
		ret = -ENODEV;
	up_read(&range->phx->lock);
	file->f_mode |= FMODE_CAN_ODIRECT;
	return ret;
}

/*
 * Pages are inserted at fault time rather than in ->mmap: a faulting VMA is
 * already linked to the file, so phx_dev_kill() setting @dead and then
 * zapping the file's mappings cannot miss a mapping being set up.
 */
static vm_fault_t phx_range_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct phx_range *range = phx_file_range(vma->vm_file);
	unsigned long addr = vmf->address & PAGE_MASK;
	unsigned long pgoff = vmf->pgoff;
	unsigned long num;
	vm_fault_t ret = VM_FAULT_NOPAGE;
	unsigned long end;
	int err;

	down_read(&range->phx->lock);
	end = DIV_ROUND_UP(phx_range_end(range), PAGE_SIZE);
	if (range->phx->dead || range->revoked || pgoff >= end) {
		ret = VM_FAULT_SIGBUS;
		goto out;
	}
	num = min3((vma->vm_end - addr) >> PAGE_SHIFT, end - pgoff,
		   PHX_FAULT_BATCH);
	err = vm_insert_pages(vma, addr, range->pages + pgoff, &num);
	/* -EBUSY: another thread mapped some of these pages first. */
	if (err && err != -EBUSY)
		ret = vmf_error(err);
out:
	up_read(&range->phx->lock);
	return ret;
}

static const struct vm_operations_struct phx_range_vm_ops = {
	.fault = phx_range_fault,
};

static int phx_range_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct phx_range *range = phx_file_range(file);
	unsigned long pages = vma_pages(vma);

	/*
	 * A private mapping would copy device memory on write: refuse it.
	 * (A shared mapping of a read-only descriptor has VM_MAYSHARE only.)
	 */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_pgoff >= range->nr_pages ||
	    pages > range->nr_pages - vma->vm_pgoff)
		return -EINVAL;

	vm_flags_set(vma, VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &phx_range_vm_ops;
	return 0;
}

static long phx_range_ioctl(struct file *file, unsigned int cmd,
			    unsigned long arg)
{
	struct phx_range *range = phx_file_range(file);
	struct phx_dev *phx = range->phx;
	struct phx_ioc_range info = {};

	if (cmd == PHX_IOC_TRIM) {
		/* It changes the file: only for those who may write it. */
		if (!(file->f_mode & FMODE_WRITE))
			return -EBADF;
		return phx_range_trim(range);
	}
	if (cmd != PHX_IOC_RANGE)
		return -ENOTTY;
	down_read(&phx->lock);
	info.size = phx_range_size(range);
	up_read(&phx->lock);
	info.offset = range->offset;
	info.bus_addr = phx->bus + range->offset;
	info.contiguous = range->contiguous;
	if (range->grow)
		info.flags |= PHX_RANGE_GROW;
	if (mapping_mapped(file->f_mapping))
		info.flags |= PHX_RANGE_MAPPED;
	if (copy_to_user((void __user *)arg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

/**
 * phx_range_trim() - give back the capacity of a GROW file past its size.
 * @range: the range of the file.
 *
 * Keeps at least one page.  Pages past the size are never mapped (faults
 * stop at the size) but may still be pinned by I/O that began before a
 * truncate; then nothing is given back.
 *
 * The caller checked that its descriptor is open for writing.
 *
 * Return: 0, -EINVAL (not a GROW file), -EBUSY (pinned), -EOPNOTSUPP
 * (the allocator cannot split the range) or -ENODEV (device gone).
 */
long phx_range_trim(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;
	struct inode *inode = range->inode;
	unsigned long keep, i;
	long ret = 0;

	if (!range->grow)
		return -EINVAL;
	if (!range->ops->trim)
		return -EOPNOTSUPP;
	inode_lock(inode);
	down_write(&phx->lock);
	if (phx->dead || range->revoked) {
		ret = -ENODEV;
		goto out;
	}
	keep = max(1UL, DIV_ROUND_UP(i_size_read(inode), PAGE_SIZE));
	if (keep >= range->nr_pages)
		goto out;
	unmap_mapping_range(inode->i_mapping, (loff_t)keep << PAGE_SHIFT, 0,
			    1);
	for (i = keep; i < range->nr_pages; i++) {
		if (page_ref_count(range->pages[i]) > 1) {
			ret = -EBUSY;
			goto out;
		}
	}
	ret = range->ops->trim(range, keep);
	if (!ret)
		range->nr_pages = keep;
out:
	up_write(&phx->lock);
	inode_unlock(inode);
	return ret;
}

/* Only a GROW file's size may change, and not past its capacity. */
static int phx_range_setattr(struct mnt_idmap *idmap, struct dentry *dentry,
			     struct iattr *attr)
{
	struct inode *inode = d_inode(dentry);
	struct phx_range *range = inode->i_private;
	int ret;

	ret = setattr_prepare(idmap, dentry, attr);
	if (ret)
		return ret;
	if (attr->ia_valid & ATTR_SIZE) {
		u64 old = i_size_read(inode);

		if (!range->grow)
			return -EINVAL;
		down_write(&range->phx->lock);
		if (range->phx->dead || range->revoked)
			ret = -ENODEV;
		else if (attr->ia_size > phx_range_size(range))
			ret = -EFBIG;
		else
			phx_range_set_size(range, old, attr->ia_size);
		up_write(&range->phx->lock);
		if (ret)
			return ret;
	}
	setattr_copy(idmap, inode, attr);
	return 0;
}

static long phx_range_fallocate(struct file *file, int mode, loff_t off,
				loff_t len)
{
	struct phx_range *range = phx_file_range(file);
	struct inode *inode = range->inode;
	long ret = 0;

	/* The memory is all there: only the size may have to move. */
	if (mode & ~FALLOC_FL_KEEP_SIZE)
		return -EOPNOTSUPP;
	if (!range->grow)
		return off + len > phx_range_size(range) ? -ENOSPC : 0;
	inode_lock(inode);
	down_write(&range->phx->lock);
	if (range->phx->dead || range->revoked)
		ret = -ENODEV;
	else if (off + len > phx_range_size(range))
		ret = -EFBIG;
	else if (!(mode & FALLOC_FL_KEEP_SIZE) &&
		 off + len > i_size_read(inode))
		phx_range_set_size(range, i_size_read(inode), off + len);
	up_write(&range->phx->lock);
	inode_unlock(inode);
	return ret;
}

static const struct inode_operations phx_range_iops = {
	.setattr = phx_range_setattr,
};

static const struct file_operations phx_range_fops = {
	.owner = THIS_MODULE,
	.open = phx_range_open,
	.llseek = generic_file_llseek,
	.read_iter = phx_range_read_iter,
	.write_iter = phx_range_write_iter,
	.mmap = phx_range_mmap,
	.fallocate = phx_range_fallocate,
	.splice_read = copy_splice_read,
	.splice_write = iter_file_splice_write,
	.fsync = noop_fsync,
	.unlocked_ioctl = phx_range_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

/*
 * Wrap @range in a new file; @range is consumed in every case.  The caller
 * holds the module (it runs an ioctl of /dev/phxN).
 */
static struct file *phx_range_file(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;
	struct vfsmount *mnt;
	struct inode *inode;
	struct file *file;
	int ret;

	ret = simple_pin_fs(&phx_fs_type, &phx_mnt, &phx_mnt_count);
	if (ret) {
		phx_range_destroy(range);
		return ERR_PTR(ret);
	}
	/* Stays what it is while the pin is held. */
	mnt = phx_mnt;
	inode = new_inode(mnt->mnt_sb);
	if (!inode) {
		simple_release_fs(&phx_mnt, &phx_mnt_count);
		phx_range_destroy(range);
		return ERR_PTR(-ENOMEM);
	}
	inode->i_ino = get_next_ino();
	inode->i_mode = S_IFREG | 0600;
	inode->i_uid = current_fsuid();
	inode->i_gid = current_fsgid();
	inode->i_size = range->grow ? 0 : phx_range_size(range);
	inode->i_op = &phx_range_iops;
	inode->i_fop = &phx_range_fops;
	simple_inode_init_ts(inode);
	/* From here on, the inode's eviction frees the range and unpins. */
	inode->i_private = range;
	mutex_lock(&phx->ranges_lock);
	range->inode = inode;
	mutex_unlock(&phx->ranges_lock);

	/* alloc_file_pseudo() does not take the module reference fput drops. */
	__module_get(THIS_MODULE);
	file = alloc_file_pseudo(inode, mnt, phx->name, O_RDWR,
				 &phx_range_fops);
	if (IS_ERR(file)) {
		module_put(THIS_MODULE);
		/* The eviction must not drop the mount's last reference. */
		mntget(mnt);
		iput(inode);
		mntput(mnt);
		return file;
	}
	file->f_mode |= FMODE_LSEEK | FMODE_PREAD | FMODE_PWRITE |
			FMODE_CAN_ODIRECT;
	return file;
}

/**
 * phx_range_install() - give a range to userspace as a new descriptor.
 * @range: a range whose pages are set, on its device's list
 *	   (phx_range_track()); consumed in every case.
 * @uarg: the ioctl argument to answer.
 * @arg: the kernel copy of it, copied back with the descriptor filled in.
 * @len: size of @arg.
 * @fd_field: where in @arg the descriptor goes.
 *
 * The descriptor (close-on-exec, the file opened O_RDWR) is installed only
 * once the answer reached userspace, so a fault leaves no descriptor behind.
 *
 * Return: 0 or a negative errno.
 */
int phx_range_install(struct phx_range *range, void __user *uarg,
		      void *arg, size_t len, __s32 *fd_field)
{
	struct file *file;
	int fd;

	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		phx_range_destroy(range);
		return fd;
	}
	file = phx_range_file(range);
	if (IS_ERR(file)) {
		put_unused_fd(fd);
		return PTR_ERR(file);
	}
	*fd_field = fd;
	if (copy_to_user(uarg, arg, len)) {
		put_unused_fd(fd);
		fput(file);
		return -EFAULT;
	}
	fd_install(fd, file);
	return 0;
}

/*
 * The last reference to a range file's inode goes: from __fput(), whose
 * file holds the mount (and so the module) until after this returns, or
 * from phx_range_file() failing, which holds the mount over it.  The pin
 * given up here is thus never the mount's last reference.
 */
static void phx_fs_evict_inode(struct inode *inode)
{
	struct phx_range *range = inode->i_private;

	truncate_inode_pages_final(&inode->i_data);
	clear_inode(inode);
	if (range) {
		phx_range_final(range);
		simple_release_fs(&phx_mnt, &phx_mnt_count);
	}
}

static const struct super_operations phx_fs_sops = {
	.statfs = simple_statfs,
	.evict_inode = phx_fs_evict_inode,
};

static int phx_fs_init_fs_context(struct fs_context *fc)
{
	struct pseudo_fs_context *ctx;

	ctx = init_pseudo(fc, PHX_FS_MAGIC);
	if (!ctx)
		return -ENOMEM;
	ctx->ops = &phx_fs_sops;
	return 0;
}

/*
 * Owned by the module: each superblock holds it, so it stays while a
 * range file's inode exists.  Never registered: only phx_range_file()
 * mounts it.
 */
static struct file_system_type phx_fs_type = {
	.owner = THIS_MODULE,
	.name = "phxmem",
	.init_fs_context = phx_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

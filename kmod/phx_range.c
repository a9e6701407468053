// SPDX-License-Identifier: GPL-2.0
/*
 * phx_range.c - the regular files through which userspace holds device memory.
 *
 * Each allocation (or imported dma-buf) becomes a file on a small internal
 * pseudo filesystem.  The file is a regular file (S_IFREG), because FUSE
 * passthrough only accepts regular backing files; its size is the size of
 * the allocation.  mmap() inserts the device's ZONE_DEVICE pages into the
 * caller's page tables, so O_DIRECT I/O into such a mapping is DMA straight
 * into device memory; read_iter/write_iter copy through the kernel's direct
 * map of those pages.  The memory is given back when the inode goes away
 * (last close and last munmap), but only once no page is pinned by I/O
 * still in flight: such ranges wait on a pending list.
 *
 * The file holds no page cache and never writes anything back: fsync has
 * nothing to do.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pseudo_fs.h>
#include <linux/slab.h>
#include <linux/uio.h>

#include "phx.h"

#define PHX_FS_MAGIC 0x70687866
/* Most pages one fault inserts: 16 MiB, bounds the time @lock is held. */
#define PHX_FAULT_BATCH 4096UL

static struct vfsmount *phx_mnt;

static struct phx_range *phx_file_range(struct file *file)
{
	return file_inode(file)->i_private;
}

/**
 * phx_range_pinned() - whether some page of @range is referenced by others.
 * @range: the range.
 *
 * A ZONE_DEVICE page of type MEMORY_DEVICE_GENERIC idles with a reference
 * count of one; mappings and I/O pins (GUP) add to it.
 *
 * Return: true while a page of @range is mapped or pinned.
 */
bool phx_range_pinned(const struct phx_range *range)
{
	unsigned long i;

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
 * phx_range_destroy() - free a range that is on no list.
 * @range: the range; its memory is released first unless already done.
 */
void phx_range_destroy(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;

	if (!range->released)
		range->ops->release(range);
	kvfree(range->pages);
	kfree(range);
	phx_dev_put(phx);
}

/**
 * phx_range_zap() - remove every user mapping of @range.
 * @range: a range on its device's list, whose file exists.
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
		list_del(&range->node);
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
	if (!range->released && phx_range_pinned(range)) {
		/* O_DIRECT I/O from an unmapped buffer may be in flight. */
		list_add_tail(&range->node, &phx->pending);
		mutex_unlock(&phx->ranges_lock);
		schedule_delayed_work(&phx->reap_work, msecs_to_jiffies(50));
		return;
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

static ssize_t phx_range_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct phx_range *range = phx_file_range(iocb->ki_filp);
	u64 size = phx_range_size(range);
	loff_t pos = iocb->ki_pos;
	ssize_t done = 0;

	if (pos < 0)
		return -EINVAL;
	if (pos >= size || !iov_iter_count(to))
		return 0;

	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked) {
		up_read(&range->phx->lock);
		return -ENODEV;
	}
	while (iov_iter_count(to) && pos < size) {
		size_t off = offset_in_page(pos);
		size_t len = min_t(u64, PAGE_SIZE - off, size - pos);
		size_t copied;

		copied = copy_page_to_iter(range->pages[pos >> PAGE_SHIFT], off,
					   len, to);
		done += copied;
		pos += copied;
		if (copied < len || fatal_signal_pending(current))
			break;
		cond_resched();
	}
	up_read(&range->phx->lock);

	iocb->ki_pos = pos;
	return done ? done : -EFAULT;
}

static ssize_t phx_range_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct phx_range *range = phx_file_range(iocb->ki_filp);
	u64 size = phx_range_size(range);
	loff_t pos = iocb->ki_pos;
	ssize_t done = 0;

	if (iocb->ki_flags & IOCB_APPEND)
		pos = size;
	if (pos < 0)
		return -EINVAL;
	if (!iov_iter_count(from))
		return 0;
	/* The size of device memory is fixed: like a block device. */
	if (pos >= size)
		return -ENOSPC;

	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked) {
		up_read(&range->phx->lock);
		return -ENODEV;
	}
	while (iov_iter_count(from) && pos < size) {
		size_t off = offset_in_page(pos);
		size_t len = min_t(u64, PAGE_SIZE - off, size - pos);
		size_t copied;

		copied = copy_page_from_iter(range->pages[pos >> PAGE_SHIFT],
					     off, len, from);
		done += copied;
		pos += copied;
		if (copied < len || fatal_signal_pending(current))
			break;
		cond_resched();
	}
	up_read(&range->phx->lock);

	iocb->ki_pos = pos;
	return done ? done : -EFAULT;
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
	int err;

	if (pgoff >= range->nr_pages)
		return VM_FAULT_SIGBUS;
	num = min3((vma->vm_end - addr) >> PAGE_SHIFT,
		   range->nr_pages - pgoff, PHX_FAULT_BATCH);

	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked) {
		ret = VM_FAULT_SIGBUS;
		goto out;
	}
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

	/* A private mapping would copy device memory on write: refuse it. */
	if (!(vma->vm_flags & VM_SHARED))
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

	if (cmd != PHX_IOC_RANGE)
		return -ENOTTY;
	info.size = phx_range_size(range);
	info.offset = range->offset;
	info.bus_addr = phx->bus + range->offset;
	info.contiguous = range->contiguous;
	if (copy_to_user((void __user *)arg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static const struct file_operations phx_range_fops = {
	.owner = THIS_MODULE,
	.open = phx_range_open,
	.llseek = generic_file_llseek,
	.read_iter = phx_range_read_iter,
	.write_iter = phx_range_write_iter,
	.mmap = phx_range_mmap,
	.fsync = noop_fsync,
	.unlocked_ioctl = phx_range_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

/* Wrap @range in a new file; @range is consumed in every case. */
static struct file *phx_range_file(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;
	struct inode *inode;
	struct file *file;

	inode = new_inode(phx_mnt->mnt_sb);
	if (!inode) {
		phx_range_destroy(range);
		return ERR_PTR(-ENOMEM);
	}
	inode->i_ino = get_next_ino();
	inode->i_mode = S_IFREG | 0600;
	inode->i_uid = current_fsuid();
	inode->i_gid = current_fsgid();
	inode->i_size = phx_range_size(range);
	inode->i_fop = &phx_range_fops;
	simple_inode_init_ts(inode);
	/* From here on, the inode's eviction frees the range. */
	inode->i_private = range;
	range->inode = inode;

	mutex_lock(&phx->ranges_lock);
	list_add_tail(&range->node, &phx->ranges);
	mutex_unlock(&phx->ranges_lock);

	/* alloc_file_pseudo() does not take the module reference fput drops. */
	__module_get(THIS_MODULE);
	file = alloc_file_pseudo(inode, phx_mnt, phx->name, O_RDWR,
				 &phx_range_fops);
	if (IS_ERR(file)) {
		module_put(THIS_MODULE);
		iput(inode);
		return file;
	}
	file->f_mode |= FMODE_LSEEK | FMODE_PREAD | FMODE_PWRITE |
			FMODE_CAN_ODIRECT;
	return file;
}

/**
 * phx_range_get_fd() - wrap a range in a new file and reserve a descriptor.
 * @range: a range whose pages are set; consumed in every case.
 * @filep: receives the file, opened O_RDWR.
 *
 * The caller reports the descriptor to userspace and then either
 * publishes it with fd_install() or undoes both with put_unused_fd() and
 * fput().  The descriptor is close-on-exec.
 *
 * Return: the reserved descriptor or a negative errno.
 */
int phx_range_get_fd(struct phx_range *range, struct file **filep)
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
	*filep = file;
	return fd;
}

static void phx_fs_evict_inode(struct inode *inode)
{
	struct phx_range *range = inode->i_private;

	truncate_inode_pages_final(&inode->i_data);
	clear_inode(inode);
	if (range)
		phx_range_final(range);
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

static struct file_system_type phx_fs_type = {
	.name = "phxmem",
	.init_fs_context = phx_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

/**
 * phx_fs_init() - mount the internal filesystem that holds range files.
 *
 * Return: 0 or a negative errno.
 */
int phx_fs_init(void)
{
	phx_mnt = kern_mount(&phx_fs_type);
	return PTR_ERR_OR_ZERO(phx_mnt);
}

/**
 * phx_fs_exit() - unmount it; every range file is gone by then.
 */
void phx_fs_exit(void)
{
	kern_unmount(phx_mnt);
}

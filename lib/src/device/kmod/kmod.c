/* SPDX-License-Identifier: MIT */
/*
 * kmod.c - device memory that the phx.ko kernel module exposes.
 *
 * Each /dev/phxN is a device.  A chunk is an allocation of the module: a
 * regular file whose MAP_SHARED mapping consists of the device's
 * ZONE_DEVICE pages.  Chunks are mapped into an address range reserved in
 * this process, so a buffer's device address is an ordinary host address:
 * the engine takes the p2p path, O_DIRECT reads and writes between a file
 * and that address are DMA by the disk controller into device memory.
 *
 * What it does not do: there is no copy engine, so copies, memsets and
 * host functions run synchronously on the calling thread when queued, and
 * a stream is always idle by the time anyone waits on it.  That keeps the
 * stream ordering the rest of the library relies on.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "phx_uapi.h"

/* Phoenix's registration granularity; a multiple of every page size. */
#define KMOD_GRANULARITY (64ULL << 10)
#define KMOD_MAX_DEVICES 64

/* Streams and events carry no state: everything completes when queued. */
static char kmod_stream_token;

struct kmod_dev {
	int fd; /* /dev/phxN */
};

static int kmod_open_node(int index)
{
	char path[32];

	snprintf(path, sizeof(path), "/dev/phx%d", index);
	return open(path, O_RDWR | O_CLOEXEC);
}

static int kmod_probe(const char **why)
{
	int n, fd;

	for (n = 0; n < KMOD_MAX_DEVICES; n++) {
		fd = kmod_open_node(n);
		if (fd < 0)
			break;
		close(fd);
	}
	if (n == 0) {
		*why = errno == ENOENT ?
			       "no /dev/phx0: the phx.ko module is not loaded or found no device" :
			       "cannot open /dev/phx0 (permission?)";
		return -ENODEV;
	}
	return n;
}

/*
 * Open /dev/phx@index and read its PHX_IOC_INFO into @info.  Returns the
 * open descriptor, or a negative errno (phx_err(), naming @name).
 */
static int kmod_node_info(int index, const char *name,
			  struct phx_ioc_info *info)
{
	int fd, err;

	fd = kmod_open_node(index);
	if (fd < 0)
		return phx_err(errno, "%s: cannot open /dev/phx%d: %s", name,
			       index, strerror(errno));
	if (ioctl(fd, PHX_IOC_INFO, info)) {
		err = errno;
		close(fd);
		return phx_err(err, "%s: PHX_IOC_INFO failed: %s", name,
			       strerror(err));
	}
	return fd;
}

static int kmod_query(int index, struct phx_device_info *info)
{
	struct phx_ioc_info ki;
	char name[16];
	int fd;

	snprintf(name, sizeof(name), "phx%d", index);
	fd = kmod_node_info(index, name, &ki);
	if (fd < 0)
		return fd;
	close(fd);
	snprintf(info->model, sizeof(info->model), "phx.ko %s memory of %s",
		 ki.provider == PHX_PROVIDER_NVIDIA ? "GPU" : "BAR",
		 ki.pci_name);
	info->capacity = ki.size;
	info->free = ki.free;
	info->numa_node = -1;
	return 0;
}

static int kmod_open(struct phx_device *dev)
{
	struct kmod_dev *kd;
	struct phx_ioc_info ki;

	kd = calloc(1, sizeof(*kd));
	if (!kd)
		return phx_err(ENOMEM, "%s: out of host memory", dev->name);
	kd->fd = kmod_node_info(dev->index, dev->name, &ki);
	if (kd->fd < 0) {
		int ret = kd->fd;

		free(kd);
		return ret;
	}
	dev->priv = kd;
	dev->granularity = KMOD_GRANULARITY;
	if (ki.page_size > dev->granularity)
		dev->granularity = ki.page_size;
	return 0;
}

static void kmod_close(struct phx_device *dev)
{
	struct kmod_dev *kd = dev->priv;

	close(kd->fd);
	free(kd);
	dev->priv = NULL;
}

static void kmod_va_release(struct phx_device *dev, phx_dptr_t va,
			    uint64_t size)
{
	munmap((void *)(uintptr_t)va, size);
}

static int kmod_chunk_create(struct phx_device *dev, uint64_t size,
			     phx_chunk_t *out)
{
	struct kmod_dev *kd = dev->priv;
	struct phx_ioc_alloc req = { .size = size };

	if (ioctl(kd->fd, PHX_IOC_ALLOC, &req)) {
		int err = errno;

		if (err == ENOSPC)
			return phx_err(
				ENOSPC,
				"%s: device memory full: %llu bytes not available; free buffers first",
				dev->name, (unsigned long long)size);
		return phx_err(err, "%s: PHX_IOC_ALLOC of %llu bytes: %s",
			       dev->name, (unsigned long long)size,
			       strerror(err));
	}
	*out = (phx_chunk_t)req.fd;
	return 0;
}

/* Pages are inserted at fault time by the module: no populate. */
static int kmod_chunk_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			  phx_chunk_t chunk)
{
	return phx_fdmem_map(dev, at, size, chunk, 0);
}

static int kmod_chunk_import(struct phx_device *dev, int fd, uint64_t size,
			     phx_chunk_t *out)
{
	struct phx_ioc_range range;

	if (ioctl(fd, PHX_IOC_RANGE, &range) || range.size < size)
		return phx_err(
			EINVAL,
			"%s: imported fd is not a phx.ko allocation of %llu bytes",
			dev->name, (unsigned long long)size);
	return phx_fdmem_dup(dev, fd, out);
}

static int kmod_backing_alloc(struct phx_device *dev, uint64_t capacity,
			      int *fd)
{
	struct kmod_dev *kd = dev->priv;
	struct phx_ioc_alloc req = { .size = capacity,
				     .flags = PHX_ALLOC_GROW };

	if (ioctl(kd->fd, PHX_IOC_ALLOC, &req)) {
		int err = errno;

		return phx_err(
			err,
			"%s: a backing file of %llu bytes: PHX_IOC_ALLOC: %s%s",
			dev->name, (unsigned long long)capacity, strerror(err),
			err == ENOSPC ? "; free files first" : "");
	}
	*fd = req.fd;
	return 0;
}

static int kmod_backing_query(struct phx_device *dev, int fd,
			      uint64_t *capacity, bool *mapped)
{
	struct phx_ioc_range r;

	if (ioctl(fd, PHX_IOC_RANGE, &r))
		return phx_err(errno,
			       "%s: fd %d is not a phx.ko backing file: %s",
			       dev->name, fd, strerror(errno));
	*capacity = r.size;
	*mapped = r.flags & PHX_RANGE_MAPPED;
	return 0;
}

static int kmod_backing_trim(struct phx_device *dev, int fd)
{
	/* EBUSY: I/O still pins a page; the room stays until next time. */
	if (ioctl(fd, PHX_IOC_TRIM) && errno != EBUSY)
		return phx_err(errno, "%s: backing fd %d: PHX_IOC_TRIM: %s",
			       dev->name, fd, strerror(errno));
	return 0;
}

static int kmod_stream_create(struct phx_device *dev, void **stream)
{
	*stream = &kmod_stream_token;
	return 0;
}

static void kmod_stream_destroy(struct phx_device *dev, void *stream)
{
}

static int kmod_stream_sync(struct phx_device *dev, void *stream)
{
	return 0;
}

static void *kmod_stream_default(struct phx_device *dev)
{
	return &kmod_stream_token;
}

static int kmod_copy_htod(struct phx_device *dev, phx_dptr_t dst,
			  const void *src, size_t len, void *stream)
{
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

static int kmod_copy_dtoh(struct phx_device *dev, void *dst, phx_dptr_t src,
			  size_t len, void *stream)
{
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static int kmod_copy_htod_batch(struct phx_device *dev,
				const struct phx_htod *copies, unsigned int n,
				void *stream)
{
	for (unsigned int i = 0; i < n; i++)
		kmod_copy_htod(dev, copies[i].dst, copies[i].src, copies[i].len,
			       stream);
	return 0;
}

static int kmod_copy_dtod(struct phx_device *dev, phx_dptr_t dst,
			  phx_dptr_t src, size_t len, void *stream)
{
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static int kmod_memset_d8(struct phx_device *dev, phx_dptr_t dst, uint8_t value,
			  size_t len, void *stream)
{
	memset((void *)(uintptr_t)dst, value, len);
	return 0;
}

static int kmod_event_create(struct phx_device *dev, void **event)
{
	*event = &kmod_stream_token;
	return 0;
}

static void kmod_event_destroy(struct phx_device *dev, void *event)
{
}

static int kmod_event_record(struct phx_device *dev, void *event, void *stream)
{
	return 0;
}

static int kmod_event_query(struct phx_device *dev, void *event)
{
	return 0;
}

static int kmod_event_sync(struct phx_device *dev, void *event)
{
	return 0;
}

static int kmod_launch_host_fn(struct phx_device *dev, void *stream,
			       void (*fn)(void *), void *arg)
{
	fn(arg);
	return 0;
}

/* Streams here are synchronous: a wait is the caller's own. */
static int kmod_stream_wait_value(struct phx_device *dev, void *stream,
				  uint32_t *word, uint64_t daddr,
				  uint32_t value)
{
	phx_word_wait(word, value);
	return 0;
}

static int kmod_stream_write_value(struct phx_device *dev, void *stream,
				   uint32_t *word, uint64_t daddr,
				   uint32_t value)
{
	phx_word_store(word, value);
	return 0;
}

const struct phx_backend_ops phx_kmod_ops = {
	.kind = PHX_DEVICE_KMOD,
	.probe = kmod_probe,
	.query = kmod_query,
	.open = kmod_open,
	.close = kmod_close,
	.va_reserve = phx_fdmem_reserve,
	.va_release = kmod_va_release,
	.chunk_create = kmod_chunk_create,
	.chunk_release = phx_fdmem_release,
	.chunk_map = kmod_chunk_map,
	.chunk_unmap = phx_fdmem_unmap,
	.chunk_export = phx_fdmem_export,
	.chunk_import = kmod_chunk_import,
	.host_addr = phx_host_addr_mapped,
	.p2p = true,
	.backing_alloc = kmod_backing_alloc,
	.backing_query = kmod_backing_query,
	.backing_trim = kmod_backing_trim,
	.host_register = phx_host_register_none,
	.host_unregister = phx_host_unregister_none,
	.stream_create = kmod_stream_create,
	.stream_destroy = kmod_stream_destroy,
	.stream_sync = kmod_stream_sync,
	.stream_default = kmod_stream_default,
	.copy_htod = kmod_copy_htod,
	.copy_dtoh = kmod_copy_dtoh,
	.copy_htod_batch = kmod_copy_htod_batch,
	.copy_dtod = kmod_copy_dtod,
	.memset_d8 = kmod_memset_d8,
	.event_create = kmod_event_create,
	.event_destroy = kmod_event_destroy,
	.event_record = kmod_event_record,
	.event_query = kmod_event_query,
	.event_sync = kmod_event_sync,
	.launch_host_fn = kmod_launch_host_fn,
	.stream_wait_value = kmod_stream_wait_value,
	.stream_write_value = kmod_stream_write_value,
	.stream_wait_auto = PHX_STREAM_WAIT_DEVICE,
};

/* SPDX-License-Identifier: MIT */
/*
 * phxfile.c - libphxfile.so, the phxFile ABI that LMCache's "phx" storage
 * backend loads (through ctypes.util.find_library("phxfile")), implemented
 * on libphoenix.
 *
 * Every call returns 0 or a negative errno.  The async calls are stream
 * ordered the way cuFileReadAsync is on a stream registered with cuFile's
 * three FIXED flags, which is how LMCache uses cuFile and what its phx
 * backend promises ("keep the pointer-backed fields unchanged while IO
 * is pending"): the values behind nbytes, file_offset and buf_offset are
 * read when the call is made, the transfer runs when the stream gets
 * there, and *bytes_done is written when it completes; a value changed
 * meanwhile makes it fail with -EINVAL.  That is phx_io_enqueue() on a
 * stream with PHX_STREAM_FIXED, which moves the bytes with the stream's
 * own copy engine, so this file only keeps the tables the ABI implies:
 * the driver's device, registered buffers, file handles and streams.
 *
 * The session (the driver's device and the tables) opens at the first
 * call that needs it, so phxFileDriverOpen() is optional, as LMCache's
 * released backend never calls it.  Explicit opens are counted; the close
 * that drops the last one, or any close when there is none (a session
 * opened implicitly), ends the session: it waits for everything queued
 * through this library on every stream it knows, forgets all buffer and
 * stream registrations and closes the device.  More closes return 0.
 * Handles are only wrapped descriptors and outlive sessions.
 *
 * What it deliberately does not do: buffer registration pins nothing
 * (libphoenix stages through its own pinned memory, or moves bytes peer
 * to peer), so it only records the range for deregistration, and
 * deregistering a base it does not know is not an error; memory that no
 * device claims by address is taken to live on the session's device
 * (device 0 of the default kind).
 *
 * libphoenix and liburing are linked in statically, and a version script
 * keeps every name but the ABI's local, so the library carries everything
 * it needs and interposes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "phoenix.h"

#define PHXFILE_EXPORT __attribute__((visibility("default")))

_Static_assert(sizeof(size_t) == sizeof(uint64_t),
	       "phxFile passes size_t where libphoenix takes uint64_t");

/*
 * A registered file: the fd stays the caller's.  The live handles are
 * listed (phxfile_handles), so that deregistering one twice, or a
 * pointer that never was one, is refused instead of freeing it again.
 */
struct phxfile_handle {
	int fd;
	struct phxfile_handle *next;
};

/* A registered memory range, for deregistration. */
struct phxfile_range {
	const void *addr;
	size_t length;
	struct phxfile_range *next;
};

/*
 * A caller's stream as seen from one device: transfers go through the
 * device that holds their buffer, so a stream used with buffers on two
 * GPUs has two wrappers.
 */
struct phxfile_stream {
	void *native;
	struct phx_device *dev; /* a reference of its own */
	struct phx_stream *stream;
	bool registered; /* by phxFileStreamRegister, not made on first use */
	struct phxfile_stream *next;
};

/*
 * The session; everything below is protected by phxfile_lock.  There is
 * a session while phxfile_dev is set; phxfile_opens counts the explicit
 * phxFileDriverOpen() calls not yet closed.
 */
static pthread_mutex_t phxfile_lock = PTHREAD_MUTEX_INITIALIZER;
static struct phx_device *phxfile_dev;
static unsigned int phxfile_opens;
static struct phxfile_range *phxfile_ranges;
static struct phxfile_handle *phxfile_handles;
static struct phxfile_stream *phxfile_streams;

PHXFILE_EXPORT int phxFileDriverOpen(void);
PHXFILE_EXPORT int phxFileDriverClose(void);
PHXFILE_EXPORT int phxFileBufRegister(const void *addr, size_t length);
PHXFILE_EXPORT int phxFileBufDeregister(const void *addr);
PHXFILE_EXPORT int phxFileHandleRegister(void **fh, int fd);
PHXFILE_EXPORT int phxFileHandleDeregister(void *fh);
PHXFILE_EXPORT int phxFileStreamRegister(void *stream);
PHXFILE_EXPORT int phxFileStreamDeregister(void *stream);
PHXFILE_EXPORT int phxFileReadAsync(void *fh, void *buf_base, size_t *nbytes,
				    int64_t *file_offset, int64_t *buf_offset,
				    int64_t *bytes_done, void *stream);
PHXFILE_EXPORT int phxFileWriteAsync(void *fh, void *buf_base, size_t *nbytes,
				     int64_t *file_offset, int64_t *buf_offset,
				     int64_t *bytes_done, void *stream);

/* The session's device, opened on first use.  Caller holds the lock. */
static int session_get_locked(void)
{
	if (phxfile_dev)
		return 0;
	return phx_device_open(NULL, &phxfile_dev);
}

/**
 * phxFileDriverOpen() - take a reference to the session, opening it.
 *
 * Optional: every other call opens the session it needs.  Each open is
 * counted and the close that drops the last one ends the session (see
 * the file header).  Returns 0, or -ENODEV when no device is usable.
 */
int phxFileDriverOpen(void)
{
	int ret;

	pthread_mutex_lock(&phxfile_lock);
	ret = session_get_locked();
	if (!ret)
		phxfile_opens++;
	pthread_mutex_unlock(&phxfile_lock);
	return ret;
}

/* Wait for what this library queued on the stream, then forget it. */
static void stream_free(struct phxfile_stream *s)
{
	phx_stream_sync(s->stream);
	phx_stream_destroy(s->stream);
	phx_device_close(s->dev);
	free(s);
}

static void streams_release_locked(void)
{
	while (phxfile_streams) {
		struct phxfile_stream *s = phxfile_streams;

		phxfile_streams = s->next;
		stream_free(s);
	}
}

static void session_end_locked(void)
{
	streams_release_locked();
	while (phxfile_ranges) {
		struct phxfile_range *r = phxfile_ranges;

		phxfile_ranges = r->next;
		free(r);
	}
	phx_device_close(phxfile_dev);
	phxfile_dev = NULL;
}

/**
 * phxFileDriverClose() - drop a reference taken by phxFileDriverOpen().
 *
 * The close that drops the last reference, or a close when only an
 * implicitly opened session exists, ends the session: it waits for the
 * work queued through this library on every stream it knows, then
 * forgets all registrations and closes the device.  The streams must
 * still be able to reach that work.  A close with no session does
 * nothing.  Always returns 0.
 */
int phxFileDriverClose(void)
{
	pthread_mutex_lock(&phxfile_lock);
	if (phxfile_opens)
		phxfile_opens--;
	if (!phxfile_opens && phxfile_dev)
		session_end_locked();
	pthread_mutex_unlock(&phxfile_lock);
	return 0;
}

/**
 * phxFileBufRegister() - declare device memory that transfers will use.
 * @addr: device address (a CUdeviceptr on CUDA).
 * @length: bytes.
 *
 * Optional, as with cuFile: transfers work on unregistered memory too.
 * Opens the session if needed.  Returns 0, -EINVAL (NULL, empty, or a
 * range that runs past the end of the address space),
 * -EEXIST (a byte of it is registered already), -ENODEV (no usable device) or -ENOMEM.
 */
int phxFileBufRegister(const void *addr, size_t length)
{
	struct phxfile_range *r;
	int ret = 0;

	/* its last byte must be in the address space */
	if (!addr || !length || length - 1 > UINTPTR_MAX - (uintptr_t)addr)
		return -EINVAL;
	pthread_mutex_lock(&phxfile_lock);
	ret = session_get_locked();
	if (ret)
		goto out;
	/*
	 * One registration per byte: with two, the one that bounds a
	 * transfer would depend on the order they were made in.  Compared
	 * by last bytes, which cannot wrap.
	 */
	for (r = phxfile_ranges; r; r = r->next) {
		uintptr_t start = (uintptr_t)r->addr;

		if ((uintptr_t)addr <= start + (r->length - 1) &&
		    start <= (uintptr_t)addr + (length - 1)) {
			ret = -EEXIST;
			goto out;
		}
	}
	r = malloc(sizeof(*r));
	if (!r) {
		ret = -ENOMEM;
		goto out;
	}
	r->addr = addr;
	r->length = length;
	r->next = phxfile_ranges;
	phxfile_ranges = r;
out:
	pthread_mutex_unlock(&phxfile_lock);
	return ret;
}

/**
 * phxFileBufDeregister() - forget a range given to phxFileBufRegister().
 *
 * A base that is not registered (never was, deregistered already, or
 * forgotten when the session ended) is left as it is.  Returns 0.
 */
int phxFileBufDeregister(const void *addr)
{
	struct phxfile_range **p, *r;

	pthread_mutex_lock(&phxfile_lock);
	for (p = &phxfile_ranges; (r = *p); p = &r->next) {
		if (r->addr == addr) {
			*p = r->next;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&phxfile_lock);
	return 0;
}

/**
 * phxFileHandleRegister() - wrap a file descriptor for the async calls.
 * @fh: receives the handle.
 * @fd: an open file (O_DIRECT or not); it stays the caller's to close,
 *	after phxFileHandleDeregister().
 *
 * Returns 0, -EINVAL (@fh NULL), -EBADF (@fd not open) or -ENOMEM.
 */
int phxFileHandleRegister(void **fh, int fd)
{
	struct phxfile_handle *h;

	if (!fh)
		return -EINVAL;
	if (fcntl(fd, F_GETFL) < 0)
		return -EBADF;
	h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fd = fd;
	pthread_mutex_lock(&phxfile_lock);
	h->next = phxfile_handles;
	phxfile_handles = h;
	pthread_mutex_unlock(&phxfile_lock);
	*fh = h;
	return 0;
}

/**
 * phxFileHandleDeregister() - free a handle; its transfers must be done.
 *
 * Returns 0, or -EINVAL for NULL or a pointer that is not a live handle
 * (deregistered already), which is left alone.  Handles outlive the
 * session: they hold no more than the fd.
 */
int phxFileHandleDeregister(void *fh)
{
	struct phxfile_handle **p, *h;

	if (!fh)
		return -EINVAL;
	pthread_mutex_lock(&phxfile_lock);
	for (p = &phxfile_handles; (h = *p); p = &h->next)
		if (h == fh)
			break;
	if (h)
		*p = h->next;
	pthread_mutex_unlock(&phxfile_lock);
	if (!h)
		return -EINVAL;
	free(h);
	return 0;
}

static struct phxfile_stream *stream_find_locked(void *native,
						 struct phx_device *dev)
{
	struct phxfile_stream *s;

	for (s = phxfile_streams; s; s = s->next)
		if (s->native == native && s->dev == dev)
			return s;
	return NULL;
}

/*
 * The wrapper for @native on @dev, made on first use; takes over the
 * caller's reference to @dev either way.  Caller holds the lock.
 */
static int stream_get_locked(void *native, struct phx_device *dev,
			     bool registering, struct phxfile_stream **out)
{
	struct phxfile_stream *s = stream_find_locked(native, dev);
	int ret;

	if (s) {
		phx_device_close(dev);
		s->registered |= registering;
		*out = s;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		phx_device_close(dev);
		return -ENOMEM;
	}
	ret = phx_stream_wrap(dev, native, &s->stream);
	if (!ret)
		ret = phx_stream_set_flags(s->stream, PHX_STREAM_FIXED);
	if (ret) {
		phx_device_close(dev);
		free(s);
		return ret;
	}
	s->native = native;
	s->dev = dev;
	s->registered = registering;
	s->next = phxfile_streams;
	phxfile_streams = s;
	*out = s;
	return 0;
}

/* A reference to the device holding @addr, else to the driver's one. */
static struct phx_device *device_of(const void *addr)
{
	struct phx_device_info info;
	struct phx_device *dev;

	if (addr && !phx_device_open_dptr(PHX_DEVICE_NONE,
					  (phx_dptr_t)(uintptr_t)addr, &dev))
		return dev;
	/* another reference to the driver's device, by its name */
	if (!phx_device_info(phxfile_dev, &info) &&
	    !phx_device_open(info.name, &dev))
		return dev;
	return NULL;
}

/**
 * phxFileStreamRegister() - declare a stream the async calls will use.
 * @stream: a CUstream on CUDA (NULL: the default stream).
 *
 * Optional: an unknown stream is wrapped on first use.  Either way the
 * stream must stay valid until phxFileStreamDeregister() or the end of
 * the session (phxFileDriverClose()), which wait for the work queued on
 * it.  Opens the session if needed.  Returns 0, -ENODEV (no usable
 * device) or -ENOMEM.
 */
int phxFileStreamRegister(void *stream)
{
	struct phxfile_stream *s;
	int ret;

	pthread_mutex_lock(&phxfile_lock);
	ret = session_get_locked();
	if (!ret) {
		struct phx_device *dev = device_of(NULL);

		ret = dev ? stream_get_locked(stream, dev, true, &s) : -ENODEV;
	}
	pthread_mutex_unlock(&phxfile_lock);
	return ret;
}

/**
 * phxFileStreamDeregister() - forget a stream; waits for its queued work.
 * @stream: as given to phxFileStreamRegister() or an async call (NULL:
 *	the default stream).
 *
 * When it returns, every transfer queued through this library on
 * @stream has completed and its *bytes_done is written: this is the
 * completion to wait for where the caller cannot synchronize the stream
 * itself.  A stream the library does not know has nothing to wait for.
 * Returns 0.
 */
int phxFileStreamDeregister(void *stream)
{
	struct phxfile_stream **p, *s;

	pthread_mutex_lock(&phxfile_lock);
	for (p = &phxfile_streams; (s = *p);) {
		if (s->native == stream) {
			*p = s->next;
			stream_free(s);
		} else {
			p = &s->next;
		}
	}
	pthread_mutex_unlock(&phxfile_lock);
	return 0;
}

/*
 * -EINVAL where a registered range holds @base and the transfer of @len
 * bytes at @buf_off from it ends past that range; the library checks the
 * rest of the values (a range that wraps: -EINVAL in bytes_done).
 * Caller holds the lock.
 */
static int range_fits_locked(const void *base, uint64_t len, int64_t buf_off)
{
	uintptr_t at = (uintptr_t)base;
	struct phxfile_range *r;

	for (r = phxfile_ranges; r; r = r->next) {
		uintptr_t start = (uintptr_t)r->addr;
		uint64_t left;

		if (at < start || at - start >= r->length)
			continue;
		left = r->length - (at - start);
		if (buf_off >= 0 && ((uint64_t)buf_off > left ||
				     len > left - (uint64_t)buf_off))
			return -EINVAL;
		return 0;
	}
	return 0;
}

/* @fh if it is a live handle, else NULL.  Caller holds the lock. */
static struct phxfile_handle *handle_find_locked(const void *fh)
{
	struct phxfile_handle *h;

	for (h = phxfile_handles; h; h = h->next)
		if (h == fh)
			return h;
	return NULL;
}

static int phxfile_async(enum phx_op op, void *fh, void *buf_base,
			 size_t *nbytes, int64_t *file_offset,
			 int64_t *buf_offset, int64_t *bytes_done, void *stream)
{
	struct phxfile_handle *h;
	struct phxfile_stream *s;
	struct phx_device *dev;
	int ret;

	/* no device memory lives at 0, whatever buf_offset says */
	if (!fh || !buf_base || !nbytes || !file_offset || !buf_offset ||
	    !bytes_done)
		return -EINVAL;
	pthread_mutex_lock(&phxfile_lock);
	/* deregistered already, or never a handle: nothing to read it from */
	h = handle_find_locked(fh);
	if (!h) {
		ret = -EINVAL;
		goto out;
	}
	ret = session_get_locked();
	if (ret)
		goto out;
	ret = range_fits_locked(buf_base, *nbytes, *buf_offset);
	if (ret)
		goto out;
	dev = device_of(buf_base);
	ret = dev ? stream_get_locked(stream, dev, false, &s) : -ENODEV;
	if (!ret)
		ret = phx_io_enqueue(s->stream, op, h->fd,
				     (phx_dptr_t)(uintptr_t)buf_base,
				     (const uint64_t *)nbytes, file_offset,
				     buf_offset, bytes_done);
out:
	pthread_mutex_unlock(&phxfile_lock);
	return ret;
}

/**
 * phxFileReadAsync() - queue a read of the file into device memory.
 * @fh: from phxFileHandleRegister().
 * @buf_base: device address of the destination buffer.
 * @nbytes, @file_offset, @buf_offset: read now and again when @stream
 *	reaches the operation (a change is -EINVAL in *@bytes_done); the
 *	data lands at @buf_base + *@buf_offset.
 * @bytes_done: receives the bytes read (short only at end of file) or a
 *	negative errno when the read completes.
 * @stream: a CUstream (NULL: the default stream).
 *
 * Opens the session if needed.  Returns 0 once queued, -EINVAL (a NULL
 * pointer, @buf_base included, @fh not a live handle (deregistered already, or never one), or
 * a range past the end of the registered buffer holding @buf_base),
 * -ENODEV (no usable device), or what phx_io_enqueue() returns;
 * the pointers must stay valid until the transfer completed.
 */
int phxFileReadAsync(void *fh, void *buf_base, size_t *nbytes,
		     int64_t *file_offset, int64_t *buf_offset,
		     int64_t *bytes_done, void *stream)
{
	return phxfile_async(PHX_OP_READ, fh, buf_base, nbytes, file_offset,
			     buf_offset, bytes_done, stream);
}

/**
 * phxFileWriteAsync() - queue a write of device memory to the file.
 *
 * The mirror of phxFileReadAsync(): @bytes_done receives the bytes
 * written or a negative errno.
 */
int phxFileWriteAsync(void *fh, void *buf_base, size_t *nbytes,
		      int64_t *file_offset, int64_t *buf_offset,
		      int64_t *bytes_done, void *stream)
{
	return phxfile_async(PHX_OP_WRITE, fh, buf_base, nbytes, file_offset,
			     buf_offset, bytes_done, stream);
}

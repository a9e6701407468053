/* SPDX-License-Identifier: MIT */
/*
 * share.c - sharing a buffer between processes: phx_buf_send() sends one
 * descriptor per backed chunk over a Unix socket (SCM_RIGHTS), with the
 * layout that places them; phx_buf_recv() maps them into a reservation of
 * the receiver's own and, where the backend can, makes each run of
 * adjacent chunks accessible in one call.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"

#define PHX_SHARE_MAGIC 0x50485842u /* "PHXB" */
#define PHX_SHARE_VERSION 2 /* chunks sent as offset and size */
#define PHX_FDS_PER_MSG 64

struct share_hdr {
	uint32_t magic;
	uint32_t version;
	uint64_t size;
	uint64_t reserved;
	uint64_t granularity;
	uint64_t max_chunk;
	uint32_t nmapped;
	uint32_t kind;
};

struct share_chunk {
	uint64_t off;
	uint64_t size;
};

static int send_all(int sock, const void *data, size_t len, const int *fds,
		    unsigned int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * PHX_FDS_PER_MSG)];
	struct iovec iov = { (void *)data, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds) {
		struct cmsghdr *cm;

		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	while (iov.iov_len) {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return phx_err(errno, "sending a buffer: %s",
				       strerror(errno));
		}
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
	}
	return 0;
}

/* Receive exactly @len bytes and up to @nfds descriptors (into @fds). */
static int recv_all(int sock, void *data, size_t len, int *fds,
		    unsigned int nfds, unsigned int *got)
{
	char cbuf[CMSG_SPACE(sizeof(int) * PHX_FDS_PER_MSG)];
	size_t done = 0;

	*got = 0;
	while (done < len) {
		struct iovec iov = { (char *)data + done, len - done };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		struct cmsghdr *cm;
		ssize_t n;

		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return phx_err(errno, "receiving a buffer: %s",
				       strerror(errno));
		if (n == 0)
			return phx_err(
				EPIPE,
				"receiving a buffer: the sender closed the socket");
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			unsigned int k, cnt;

			if (cm->cmsg_level != SOL_SOCKET ||
			    cm->cmsg_type != SCM_RIGHTS)
				continue;
			cnt = (unsigned int)((cm->cmsg_len - CMSG_LEN(0)) /
					     sizeof(int));
			for (k = 0; k < cnt; k++) {
				int fd;

				memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int),
				       sizeof(int));
				if (*got < nfds)
					fds[(*got)++] = fd;
				else
					close(fd);
			}
		}
		done += (size_t)n;
	}
	return 0;
}

PHX_EXPORT int phx_buf_send(struct phx_buf *buf, int sock)
{
	struct phx_device *dev = buf->dev;
	struct share_hdr hdr = { 0 };
	struct share_chunk idx[PHX_FDS_PER_MSG];
	int fds[PHX_FDS_PER_MSG];
	unsigned int i, n = 0, k;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	pthread_mutex_lock(&buf->lock);
	hdr.magic = PHX_SHARE_MAGIC;
	hdr.version = PHX_SHARE_VERSION;
	hdr.size = buf->size;
	hdr.reserved = buf->reserved;
	hdr.granularity = phx_buf_gran(buf);
	hdr.max_chunk = phx_max_chunk_of(hdr.granularity);
	hdr.kind = (uint32_t)dev->ops->kind;
	for (i = 0; i < buf->nchunks; i++)
		hdr.nmapped += buf->chunks[i].mapped;
	ret = send_all(sock, &hdr, sizeof(hdr), NULL, 0);
	for (i = 0; i < buf->nchunks && !ret; i++) {
		struct phx_buf_chunk *c = &buf->chunks[i];

		if (!c->mapped)
			continue;
		ret = dev->ops->chunk_export(dev, c->handle, c->size, &fds[n]);
		if (ret)
			break;
		idx[n].off = c->off;
		idx[n].size = c->size;
		if (++n == PHX_FDS_PER_MSG) {
			ret = send_all(sock, idx, n * sizeof(idx[0]), fds, n);
			for (k = 0; k < n; k++)
				close(fds[k]);
			n = 0;
		}
	}
	if (!ret && n)
		ret = send_all(sock, idx, n * sizeof(idx[0]), fds, n);
	for (k = 0; k < n; k++)
		close(fds[k]);
	pthread_mutex_unlock(&buf->lock);
	return ret;
}

/* The table entry, carved out of a hole of @buf, for a received chunk. */
static int share_place(struct phx_buf *buf, const struct share_chunk *sc,
		       struct phx_buf_chunk **out)
{
	uint64_t gran = phx_buf_gran(buf);
	unsigned int i;
	int ret;

	i = phx_chunk_find(buf, sc->off);
	if (!sc->size || sc->off % gran || sc->size % gran ||
	    sc->off + sc->size < sc->off ||
	    sc->off + sc->size > buf->reserved || buf->chunks[i].mapped ||
	    sc->off + sc->size > buf->chunks[i].off + buf->chunks[i].size)
		return phx_err(EPROTO,
			       "receiving a buffer: bad chunk %llu+%llu",
			       (unsigned long long)sc->off,
			       (unsigned long long)sc->size);
	ret = phx_chunk_carve(buf, &i, sc->off, sc->off + sc->size);
	if (!ret)
		*out = &buf->chunks[i];
	return ret;
}

/*
 * Make @buf's received chunks, mapped bare, accessible: one call per run
 * of adjacent chunks (a staged file is one run), not one per chunk.
 */
static int share_access(struct phx_buf *buf)
{
	struct phx_device *dev = buf->dev;
	unsigned int i, j;
	int ret;

	for (i = 0; i < buf->nchunks; i = j) {
		uint64_t end;

		if (!buf->chunks[i].mapped) {
			j = i + 1;
			continue;
		}
		end = buf->chunks[i].off + buf->chunks[i].size;
		for (j = i + 1; j < buf->nchunks && buf->chunks[j].mapped &&
				buf->chunks[j].off == end;
		     j++)
			end += buf->chunks[j].size;
		ret = dev->ops->range_access(dev,
					     buf->dptr + buf->chunks[i].off,
					     end - buf->chunks[i].off);
		if (ret)
			return ret;
	}
	return 0;
}

PHX_EXPORT int phx_buf_recv(struct phx_device *dev, int sock,
			    struct phx_buf **out)
{
	struct share_hdr hdr;
	struct share_chunk idx[PHX_FDS_PER_MSG];
	int fds[PHX_FDS_PER_MSG];
	struct phx_buf *buf = NULL;
	unsigned int left, n, got, k;
	bool bare = dev->ops->chunk_map_bare && dev->ops->range_access;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	ret = recv_all(sock, &hdr, sizeof(hdr), fds, 0, &got);
	if (ret)
		return ret;
	if (hdr.magic != PHX_SHARE_MAGIC || hdr.version != PHX_SHARE_VERSION)
		return phx_err(
			EPROTO,
			"receiving a buffer: not a libphoenix buffer message");
	if (hdr.kind != (uint32_t)dev->ops->kind ||
	    hdr.granularity != dev->granularity ||
	    hdr.max_chunk != phx_max_chunk_of(hdr.granularity))
		return phx_err(
			EINVAL,
			"receiving a buffer: it comes from a %s device with another layout; open the same device kind with the same PHX_ALLOC_CHUNK",
			phx_kind_name((enum phx_device_kind)hdr.kind));
	ret = phx_buf_new(dev, hdr.reserved, PHX_BUF_SPARSE, true, &buf);
	if (ret)
		goto out_destroy;
	buf->size = hdr.size;
	for (left = hdr.nmapped; left; left -= n) {
		n = phx_min(left, PHX_FDS_PER_MSG);
		ret = recv_all(sock, idx, n * sizeof(idx[0]), fds, n, &got);
		if (ret)
			goto out_destroy;
		if (got != n) {
			ret = phx_err(
				EPROTO,
				"receiving a buffer: descriptors missing");
			for (k = 0; k < got; k++)
				close(fds[k]);
			goto out_destroy;
		}
		for (k = 0; k < n; k++) {
			struct phx_buf_chunk *c = NULL;

			if (!ret)
				ret = share_place(buf, &idx[k], &c);
			if (ret) {
				close(fds[k]);
				continue;
			}
			ret = dev->ops->chunk_import(dev, fds[k], c->size,
						     &c->handle);
			close(fds[k]);
			if (ret)
				continue;
			ret = (bare ? dev->ops->chunk_map_bare :
				      dev->ops->chunk_map)(
				dev, buf->dptr + c->off, c->size, c->handle);
			if (ret) {
				dev->ops->chunk_release(dev, c->handle,
							c->size);
				continue;
			}
			c->mapped = true;
			buf->committed += c->size;
		}
		if (ret)
			goto out_destroy;
	}
	if (bare) {
		ret = share_access(buf);
		if (ret)
			goto out_destroy;
	}
	*out = buf;
	phx_err_clear();
	return 0;

out_destroy:
	if (buf)
		phx_buf_destroy(buf);
	return ret;
}

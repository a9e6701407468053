# SPDX-License-Identifier: MIT
"""What a hostile local user does to phxfs's control socket.

test_attacks.py runs this as another user (setpriv), as a script given on the
command line:  python3 -c "$(cat hostile.py)" COMMAND SOCKET [ARGS]

Every command prints one line per answer it got, so the test sees what
the daemon said; none of them waits on time, only on the daemon's answers
and on the end of each connection (the daemon closed it).
"""
import array
import os
import socket
import sys


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def send(s, line, fds=()):
    if fds:
        s.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                            array.array("i", fds))])
    else:
        s.sendall(line)


def answer(s):
    """The daemon's lines up to the end of the connection."""
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:  # closed with our bytes unread
            b = b""
        if not b:
            return out.decode(errors="replace")
        out += b


def first(text):
    return text.splitlines()[0] if text else "EOF"


def request(sock, line, fds=()):
    s = connect(sock)
    send(s, line, fds)
    out = answer(s)
    s.close()
    return out


def cmd_req(sock, line, *paths):
    """One request with descriptors of @paths (O_PATH, or O_RDWR with a
    leading '+', O_RDONLY with '<', O_WRONLY with '>'); prints the first
    answer line."""
    modes = {"+": os.O_RDWR, "<": os.O_RDONLY, ">": os.O_WRONLY}
    fds = []
    for p in paths:
        if p[:1] in modes:
            fds.append(os.open(p[1:], modes[p[:1]]))
        else:
            fds.append(os.open(p, os.O_PATH))
    print(first(request(sock, line.encode() + b"\n", fds)))


def cmd_fdflood(sock, count, per_batch):
    """@count connections, at most @per_batch at once, each holding
    eight descriptors over two messages and a bad request; each waits
    for the daemon to answer and close."""
    count, per_batch = int(count), int(per_batch)
    extra = [os.open("/dev/null", os.O_RDONLY) for _ in range(8)]
    answers = {}
    done = 0
    while done < count:
        batch = [connect(sock) for _ in range(min(per_batch, count - done))]
        for s in batch:
            send(s, b"CP", extra[:4])
            send(s, b"OUT", extra[4:])
            send(s, b" nonsense\n", extra[:2])
        for s in batch:
            key = first(answer(s)).split(":")[0]
            answers[key] = answers.get(key, 0) + 1
            s.close()
        done += len(batch)
    for k, v in sorted(answers.items()):
        print("%d %s" % (v, k))


def cmd_hold(sock, n):
    """Open @n silent connections; once told (a line on stdin), print how
    many were turned away, then keep the rest until stdin closes, and end
    them with a bad request each, waiting for the daemon to close them.
    The daemon accepts in order and answers a refusal before it accepts
    the next: a round trip of another client's after ours means the
    answers are there."""
    held = [connect(sock) for _ in range(int(n))]
    print("connected", flush=True)
    sys.stdin.readline()
    admitted = []
    for s in held:
        s.setblocking(False)
        try:
            if not s.recv(4096).startswith(b"ERR 11 "):
                raise SystemExit("an unexpected answer")
            s.close()
        except BlockingIOError:
            admitted.append(s)
    print("refused %d" % (len(held) - len(admitted)), flush=True)
    sys.stdin.read()
    for s in admitted:
        s.setblocking(True)
        send(s, b"\n")
        answer(s)
        s.close()


def cmd_status_noread(sock):
    """Ask for STATUS and never read the answer, until stdin closes."""
    s = connect(sock)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    send(s, b"STATUS\n")
    print("sent", flush=True)
    sys.stdin.read()
    s.close()


def cmd_open_resize(sock, path):
    """OPEN @path (our own file) and try to cut and to grow every
    descriptor of its memory that came with the answer; prints the reply
    and one errno name (or "resized") per try."""
    import errno
    import stat
    s = connect(sock)
    send(s, b"OPEN %d\n" % os.stat(path).st_ino, [os.open(path, os.O_PATH)])
    data, fds = b"", []
    while True:  # the daemon closes the connection after the stream
        msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(64 * 4))
        if not msg:
            break
        data += msg
        for level, kind, cd in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", cd[:len(cd) - len(cd) % 4])
    tries = []
    for fd in fds:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not st.st_size:
            continue  # not a file of device memory
        for size in (0, os.fstat(fd).st_size * 2):
            try:
                os.ftruncate(fd, size)
                tries.append("resized")
            except OSError as e:
                tries.append(errno.errorcode[e.errno])
    print(first(data.decode(errors="replace")), " ".join(tries))


def cmd_silent(sock):
    """Connect, send nothing: the daemon drops us after ctl_timeout."""
    s = connect(sock)
    print(first(answer(s)))


def main():
    cmds = {"req": cmd_req, "fdflood": cmd_fdflood, "hold": cmd_hold,
            "status-noread": cmd_status_noread, "silent": cmd_silent,
            "open-resize": cmd_open_resize}
    cmds[sys.argv[1]](*sys.argv[2:])


main()

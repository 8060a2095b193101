# A stranger at collx's listening ports: for each port given, five
# connections that are not a rank of the job: one that says nothing and
# closes, one of random bytes, a handshake with a made-up proof (a wrong
# token) followed by a message header claiming 2^62 bytes, a silent one
# held open for HOLD seconds, and a second made-up handshake. Prints how
# many connections it made. usage: stranger.py HOLD PORT...
import os
import socket
import struct
import sys
import time

AUTH_MAGIC = 0x31415843
HDR_MAGIC = 0x4d584343


def conn(port):
    return socket.create_connection(("127.0.0.1", port), timeout=0.5)


def quiet(f):
    try:
        f()
    except OSError:
        pass


def fake_handshake(port, with_header):
    s = conn(port)
    # hello: magic, flags (token), nonce; then a proof that proves nothing
    quiet(lambda: s.sendall(struct.pack("<II", AUTH_MAGIC, 1) +
                            os.urandom(32) + bytes(32)))
    quiet(lambda: s.recv(72))
    if with_header:
        quiet(lambda: s.sendall(struct.pack("<IIhhiQQ16s", HDR_MAGIC, 1, 2, 0,
                                            0, 0, 1 << 62, b"allreduce")))
    quiet(lambda: s.recv(1))
    s.close()


def attack(port, hold):
    s = conn(port)
    s.close()
    s = conn(port)
    quiet(lambda: s.sendall(os.urandom(512)))
    time.sleep(0.3)
    s.close()
    fake_handshake(port, True)
    s = conn(port)
    time.sleep(hold)
    s.close()
    fake_handshake(port, False)
    return 5


def main():
    hold = float(sys.argv[1])
    n = sum(attack(int(p), hold) for p in sys.argv[2:])
    print(n)


main()

"""Slow clients (slowloris) cannot hold connections: a request head that does not arrive within
`server.header_read_timeout` gets the connection closed, and while many such clients dribble,
ordinary requests are still served."""

import socket
import time
import urllib.request

from conftest import Server


def test_connections_that_dribble_headers_are_closed_and_do_not_starve_others(tmp_path):
    server = Server(tmp_path, [], {"ICEGATE__SERVER__HEADER_READ_TIMEOUT": "1s"}).start()
    try:
        slow = []
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finishes the head
            slow.append(s)
        # Served while 64 connections dribble.
        with urllib.request.urlopen(f"{server.uri}/health", timeout=5) as response:
            assert response.status == 200
        started = time.monotonic()
        closed = 0
        for s in slow:
            s.settimeout(max(0.1, 6 - (time.monotonic() - started)))
            try:
                while s.recv(1024):
                    pass  # a response may come before the close
                closed += 1
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass  # still open: counted as not closed
            finally:
                s.close()
        assert closed == 64, f"only {closed} of 64 slow connections were closed by the server"
        assert time.monotonic() - started < 6
    finally:
        server.stop()

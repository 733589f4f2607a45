"""The observing proxy passes the metadata service's answer on as it came: its headers too, the Date among them (the
simulated cloud's time, which a handler may read as the cloud's clock)."""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from forewarn.conformance.proxy import ObservingProxy

SIMULATED = "Mon, 19 Sep 2016 18:29:47 GMT"


class Service(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = b'{"Events": []}'
        self.send_response_only(200)
        self.send_header("Date", SIMULATED)
        self.send_header("Server", "Microsoft-IIS/10.0")
        self.send_header("ETag", '"1"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_the_answer_keeps_the_services_date_and_headers():
    service = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    proxy = ObservingProxy("WestNO_0", f"http://127.0.0.1:{service.server_address[1]}", time.monotonic()).start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]), timeout=5)
        connection.request("GET", "/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"})
        answer = connection.getresponse()
        assert answer.read() == b'{"Events": []}'
        assert answer.getheader("Date") == SIMULATED
        assert answer.getheader("Server") == "Microsoft-IIS/10.0" and answer.getheader("ETag") == '"1"'
        assert answer.headers.get_all("Date") == [SIMULATED]  # one Date, the service's
        connection.close()
    finally:
        proxy.stop()
        service.shutdown()
        service.server_close()

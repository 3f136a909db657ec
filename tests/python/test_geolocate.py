"""/geolocate: the caller's address always; its location only when a GeoIP database is configured
(a local MaxMind DB file; heddle never fetches one)."""

from __future__ import annotations

import uuid
from pathlib import Path

from heddle_support import _TMP_ROOT, HeddleServer, heddle_bin
from mmdb_writer import MMDBWriter
from netaddr import IPSet


def _loopback_db(path: Path) -> None:
    writer = MMDBWriter(ip_version=4, database_type="GeoLite2-City", languages=["en"])
    writer.insert_network(
        IPSet(["127.0.0.0/8"]),
        {
            "country": {"iso_code": "XL", "names": {"en": "Loopland"}},
            "city": {"names": {"en": "Loopville"}},
            "location": {"latitude": 1.5, "longitude": 2.5},
        },
    )
    writer.to_db_file(str(path))


def test_geolocate_without_database_gives_the_address_only(server: HeddleServer) -> None:
    r = server.get("/geolocate")
    assert r.status_code == 200, r.text
    assert r.json() == {"ip": "127.0.0.1"}


def test_geolocate_with_database_adds_the_location() -> None:
    root = _TMP_ROOT / f"geo-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    db = root / "test-city.mmdb"
    _loopback_db(db)
    srv = HeddleServer(
        heddle_bin(), root / "data", root / "server.log", extra_args=["--geoip-db", str(db)]
    )
    srv.start()
    try:
        body = srv.get("/geolocate").json()
        assert body["ip"] == "127.0.0.1"
        assert body["location"]["city"]["names"]["en"] == "Loopville"
        assert body["location"]["country"]["iso_code"] == "XL"
        assert body["location"]["location"] == {"latitude": 1.5, "longitude": 2.5}
        assert srv.get("/geolocate", key="wrong").status_code == 401
    finally:
        srv.stop()

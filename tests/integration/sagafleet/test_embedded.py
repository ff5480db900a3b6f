"""The embedded default starts real servers, reuses them, and stops them cleanly."""

from __future__ import annotations

from pathlib import Path

import psycopg
import redis

from sagafleet import embedded


def test_embedded_servers_start_reuse_and_stop(tmp_path_factory) -> None:
    # given a bare SAGAFLEET_HOME
    home = Path(tmp_path_factory.mktemp("h", numbered=True))
    try:
        # when the servers are started twice
        first_pg = embedded.start_postgres(home)
        second_pg = embedded.start_postgres(home)
        first_redis = embedded.start_redis(home)
        second_redis = embedded.start_redis(home)

        # then the second start reuses the first servers
        assert first_pg.url == second_pg.url
        assert first_redis.pid == second_redis.pid != 0
        with psycopg.connect(first_pg.url) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
        client = redis.Redis(unix_socket_path=str(first_redis.socket))
        assert client.ping()
        client.close()
    finally:
        stopped = embedded.stop_embedded(home)

    # and stopping reports both were running, and nothing answers afterwards
    assert stopped == {"redis": True, "postgres": True}
    assert embedded.stop_embedded(home) == {"redis": False, "postgres": False}

"""Unit tests of the gateway under test and the peer beside it, as configured, commanded and
given their environment: nothing is started."""

import os
import shutil
import tempfile
import unittest

from benchkit import services
from benchkit.gateway import MODEL, NginxProxy, Switchyard, Target, Upstream
from benchkit.questions import instructions, legs

PLAIN = Upstream(4000)
TLS = Upstream(4001, ca="/run/ca.crt")


class Folder(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)


class SwitchyardConfigTest(Folder):
    def test_a_plain_target_is_a_provider_at_the_mocks_scenario(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("ok", [Target(PLAIN, "ok~chunks=1")])
        self.assertEqual(gateway.config(), {
            "providers": {"p0": {"kind": "openai_compatible", "base_url": "http://127.0.0.1:4000/ok~chunks=1/v1"}},
            "routes": {"ok": {"targets": [f"p0:{MODEL}"]}},
        })

    def test_a_tls_target_is_https_and_trusts_the_mocks_authority(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("ok-tls", [Target(TLS, "ok")])
        self.assertEqual(gateway.config()["providers"]["p0"], {
            "kind": "openai_compatible", "base_url": "https://127.0.0.1:4001/ok/v1", "ca_file": "/run/ca.crt"})

    def test_an_anthropic_target_takes_the_base_url_without_v1(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("messages", [Target(PLAIN, "ok", "anthropic")])
        self.assertEqual(gateway.config()["providers"]["p0"],
                         {"kind": "anthropic", "base_url": "http://127.0.0.1:4000/ok"})

    def test_targets_keep_their_order_and_the_route_its_settings(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("hang", [Target(PLAIN, "hang", provider="hang_primary"), Target(PLAIN, "ok", provider="hang")],
                      retry={"max_attempts": 1}, timeouts={"first_byte": "1000ms", "total": "1000ms"})
        self.assertEqual(gateway.config()["routes"]["hang"], {
            "retry": {"max_attempts": 1}, "timeouts": {"first_byte": "1000ms", "total": "1000ms"},
            "targets": [f"hang_primary:{MODEL}", f"hang:{MODEL}"]})
        self.assertEqual(list(gateway.config()["providers"]), ["hang_primary", "hang"])

    def test_a_provider_named_twice_is_refused(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("a", [Target(PLAIN, "ok", provider="mock")])
        with self.assertRaisesRegex(ValueError, "provider mock"):
            gateway.route("b", [Target(PLAIN, "ok", provider="mock")])

    def test_with_redis_its_health_is_shared_under_the_bench_prefix(self):
        gateway = Switchyard("/build/switchyard", self.folder, "switchyard-redis", state="redis://127.0.0.1:6390/0")
        gateway.route("ok", [Target(PLAIN, "ok")])
        self.assertEqual(gateway.config()["state"], {"redis": "redis://127.0.0.1:6390/0", "prefix": "bench"})
        self.assertTrue(gateway.config_path.endswith("/switchyard-redis.yaml"))

    def test_plain_it_has_neither_state_nor_telemetry(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.route("ok", [Target(PLAIN, "ok")])
        self.assertNotIn("state", gateway.config())
        self.assertNotIn("telemetry", gateway.config())

    def test_telemetry_is_its_section_as_given(self):
        telemetry = {"endpoint": "http://127.0.0.1:4000/_otlp", "sampler": "always_on"}
        gateway = Switchyard("/build/switchyard", self.folder, telemetry=telemetry)
        self.assertEqual(gateway.config()["telemetry"], telemetry)

    def test_starting_without_a_route_is_refused_before_any_process(self):
        with self.assertRaisesRegex(ValueError, "no route"):
            Switchyard("/build/switchyard", self.folder).start()
        self.assertEqual(os.listdir(self.folder), [])


class SwitchyardCommandTest(Folder):
    def test_it_serves_its_config_on_an_ephemeral_loopback_port(self):
        gateway = Switchyard("/build/switchyard", self.folder, "after")
        self.assertEqual(gateway.command(), ["/build/switchyard", "serve", "--config",
                                             os.path.join(self.folder, "after.yaml"), "--listen", "127.0.0.1:0"])
        self.assertEqual(gateway.log, os.path.join(self.folder, "after.log"))

    def test_pinned_and_under_a_tool_the_tool_runs_it_on_the_core(self):
        gateway = Switchyard("/build/switchyard", self.folder, core=0, wrapper=["valgrind", "--tool=callgrind"])
        self.assertEqual(gateway.command()[:6], ["taskset", "-c", "0", "valgrind", "--tool=callgrind",
                                                 "/build/switchyard"])

    def test_its_environment_leaves_out_otel_settings_and_adds_its_own(self):
        gateway = Switchyard("/build/switchyard", self.folder, env={"RUST_LOG": "warn"})
        base = {"PATH": "/usr/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "1"}
        self.assertEqual(gateway.environment(base), {"PATH": "/usr/bin", "RUST_LOG": "warn"})

    def test_a_client_names_the_route_as_its_model(self):
        gateway = Switchyard("/build/switchyard", self.folder)
        gateway.port = 4680
        self.assertEqual(gateway.endpoint("plain-ok"), ("http://127.0.0.1:4680/v1/chat/completions", "plain-ok"))
        self.assertEqual(gateway.endpoint("a", "/v1/messages"), ("http://127.0.0.1:4680/v1/messages", "a"))
        self.assertIsNone(gateway.pid)


class UpstreamTest(unittest.TestCase):
    def test_the_mock_itself_is_reached_at_its_scenarios_path(self):
        self.assertEqual(PLAIN.endpoint("ok"), ("http://127.0.0.1:4000/ok/v1/chat/completions", MODEL))
        self.assertEqual(TLS.endpoint("ok~chunks=20~gap=5ms"),
                         ("https://127.0.0.1:4001/ok~chunks=20~gap=5ms/v1/chat/completions", MODEL))
        self.assertFalse(PLAIN.tls)
        self.assertTrue(TLS.tls)


class NginxProxyTest(Folder):
    def test_plain_at_the_root_and_tls_under_tls_with_the_certificate_verified(self):
        text = NginxProxy(self.folder, PLAIN, TLS).http(5000)
        self.assertIn("upstream mock { server 127.0.0.1:4000;", text)
        self.assertIn("upstream mock_tls { server 127.0.0.1:4001;", text)
        self.assertIn("listen 127.0.0.1:5000;", text)
        self.assertIn("location / { proxy_pass http://mock; }", text)
        self.assertIn("proxy_ssl_trusted_certificate /run/ca.crt;", text)
        self.assertIn("proxy_ssl_verify on;", text)
        self.assertIn("proxy_buffering off;", text)

    def test_without_a_tls_upstream_there_is_no_tls_location(self):
        text = NginxProxy(self.folder, PLAIN).http(5000)
        self.assertNotIn("mock_tls", text)
        self.assertNotIn("location /tls/", text)

    def test_extra_locations_go_into_its_server_block(self):
        text = NginxProxy(self.folder, PLAIN, locations="location = /x { return 204; }").http(5000)
        server = text[text.index("server {"):]
        self.assertIn("location = /x { return 204; }", server)

    def test_its_command_and_where_a_client_reaches_each_upstream(self):
        proxy = NginxProxy(self.folder, PLAIN, TLS, core=0)
        prefix = os.path.join(self.folder, "nginx")
        self.assertEqual(proxy.command("/usr/sbin/nginx"), ["taskset", "-c", "0", "/usr/sbin/nginx", "-p", prefix,
                                                            "-c", os.path.join(prefix, "nginx.conf")])
        proxy.port = 5000
        self.assertEqual(proxy.endpoint("ok"), ("http://127.0.0.1:5000/ok/v1/chat/completions", MODEL))
        self.assertEqual(proxy.endpoint("ok", tls=True), ("http://127.0.0.1:5000/tls/ok/v1/chat/completions", MODEL))

    def test_one_process_for_the_tools_that_watch_the_process_that_serves(self):
        proxy = NginxProxy(self.folder, PLAIN, one_process=True)
        _, path = services.nginx_conf(self.folder, proxy.http(5000), proxy.one_process)
        self.assertEqual(path, proxy.conf_path)
        with open(path) as f:
            text = f.read()
        self.assertIn("master_process off;", text)
        self.assertNotIn("worker_processes", text)
        self.assertIn("server 127.0.0.1:4000;", text)


class QuestionsGatewaysTest(Folder):
    """The questions that count or trace one process build nginx-proxy as one process and each
    build with a route per scenario they load."""

    def test_instructions_counts_nginx_then_each_build_over_every_load(self):
        built = instructions.gateways(self.folder, PLAIN, {"before": "/old", "after": "/new"}, nginx=True)
        self.assertEqual([g.name for g in built], ["nginx", "before", "after"])
        self.assertTrue(built[0].one_process)
        scenarios = [spec["scenario"] for spec in [*instructions.LOADS.values(), instructions.LEGS_LOAD]]
        self.assertEqual(list(built[2].config()["routes"]), scenarios)
        self.assertEqual(built[2].binary, "/new")

    def test_legs_traces_nginx_and_the_build_over_warm_and_cold_streams(self):
        built = legs.gateways(self.folder, PLAIN, {"switchyard": "/new"})
        self.assertEqual([g.name for g in built], ["nginx", "switchyard"])
        self.assertTrue(built[0].one_process)
        self.assertEqual(list(built[1].config()["routes"]), list(legs.LOADS.values()))


if __name__ == "__main__":
    unittest.main()

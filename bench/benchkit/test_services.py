"""Unit tests of the benchmarks' process helpers that need no process: `--bin` parsing, nginx's configuration."""

import argparse
import os
import shutil
import tempfile
import unittest

from benchkit import services


class Refused(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """A parser whose errors are exceptions, not exits."""

    def error(self, message):
        raise Refused(message)


class NamedBinariesTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(lambda: os.rmdir(folder))
        self.path = os.path.join(folder, "switchyard")
        open(self.path, "w").close()
        self.addCleanup(lambda: os.remove(self.path))

    def parse(self, *items):
        return services.named_binaries(Parser(), list(items), ["nginx", "mock"])

    def test_builds_are_named_in_order_with_absolute_paths(self):
        relative = os.path.relpath(self.path)
        binaries = self.parse(f"before={self.path}", f"after_2={relative}")
        self.assertEqual(list(binaries), ["before", "after_2"])
        self.assertEqual(binaries["after_2"], self.path)

    def test_a_name_that_could_collide_or_escape_is_refused(self):
        for item in [f"nginx={self.path}", f"mock={self.path}", f"a/b={self.path}", f"a.log={self.path}",
                     f"={self.path}", "plain", "x=/no/such/file"]:
            with self.assertRaises(Refused, msg=item) as refused:
                self.parse(item)
            self.assertIn(repr(item), str(refused.exception))
        with self.assertRaises(Refused):
            self.parse(f"a={self.path}", f"a={self.path}")


class NginxConfTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)

    def test_the_callers_directives_go_inside_the_http_block_and_files_under_the_folder(self):
        prefix, path = services.nginx_conf(self.folder, "    server { listen 127.0.0.1:1; }")
        self.assertEqual(prefix, os.path.join(self.folder, "nginx"))
        with open(path) as f:
            text = f.read()
        self.assertIn("worker_processes auto;", text)
        self.assertNotIn("master_process", text)
        http = text[text.index("http {"):]
        self.assertIn("server { listen 127.0.0.1:1; }\n}", http)
        for line in ("pid", "error_log", "client_body_temp_path", "proxy_temp_path"):
            [value] = [l for l in text.splitlines() if l.strip().startswith(line + " ")]
            self.assertIn(prefix, value)
        self.assertTrue(os.path.isdir(os.path.join(prefix, "tmp")) and os.path.isdir(os.path.join(prefix, "logs")))


if __name__ == "__main__":
    unittest.main()

"""Values as Ray users pass them: classes and exceptions of the driver's
script (__main__) by value, futures nested in containers, and the messages
a mistake gets. Each case is a script run against a real node (its __main__
is the point)."""

import os
import subprocess
import sys
import textwrap

import pytest

import shoal

HERE = os.path.dirname(os.path.abspath(__file__))


def run_script(node, body, tmp_path, name="driver.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, SHOAL_JOB_ID=node.job_id)
    p = subprocess.run([sys.executable, "-W", "always", str(script)],
                       cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    return p


def test_main_classes_go_by_value(node, tmp_path):
    """A dataclass of the script reaches a task (by name and by value) and
    comes back as the script's own class."""
    run_script(node, """
        import dataclasses
        import shoal

        @dataclasses.dataclass
        class Point:
            x: float
            y: float

        def norm2(p):                    # imported by name by the worker
            return p.x * p.x + p.y * p.y

        def moved(p, dx):
            return Point(p.x + dx, p.y)

        if __name__ == "__main__":
            c = shoal.connect()
            assert c.submit(norm2, Point(3, 4)).result(60) == 25
            assert c.submit(lambda p: p.y, Point(1, 2)).result(60) == 2
            back = c.submit(moved, Point(1, 2), 10).result(60)
            assert type(back) is Point and back == Point(11, 2), back
            back = c.submit(lambda p: Point(p.y, p.x), Point(1, 2)).result(60)
            assert type(back) is Point and back == Point(2, 1), back
            print("ok")
    """, tmp_path)


def test_nested_futures_are_their_values(node, tmp_path):
    """Futures inside a list, a dict and a dataclass: the task gets their
    values; a failed one fails the task with its error."""
    run_script(node, """
        import dataclasses, time
        import shoal

        @dataclasses.dataclass
        class Box:
            item: object

        def slow(x):
            time.sleep(0.2)
            return x

        def total(xs, d, box):
            return sum(xs) + d["k"] + box.item

        def boom():
            raise KeyError("gone")

        if __name__ == "__main__":
            c = shoal.connect()
            a, b = c.submit(slow, 1), c.submit(slow, 2)
            f = c.submit(total, [a, b], {"k": c.submit(slow, 10)},
                         Box(c.submit(slow, 100)))
            assert f.result(60) == 113, f.result()
            g = c.submit(total, [c.submit(boom)], {"k": 1}, Box(1))
            try:
                g.result(60)
            except KeyError:
                pass
            else:
                raise AssertionError("no KeyError")
            print("ok")
    """, tmp_path)

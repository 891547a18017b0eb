"""The paperwork thread: Events and conditions off the step's path, in order, not lost."""

from __future__ import annotations

import threading

from fleetmedic.controller.paperwork import Paperwork


def test_posts_run_in_order_on_another_thread_and_a_failure_does_not_stop_the_rest():
    done: list[int] = []
    where: set[str] = set()
    gate = threading.Event()
    pw = Paperwork()

    def job(i: int):
        def run():
            gate.wait(5)
            where.add(threading.current_thread().name)
            if i == 2:
                raise RuntimeError("API server said no")
            done.append(i)

        return run

    for i in range(5):
        pw.post(job(i))
    assert done == []  # the caller did not wait for them
    gate.set()
    pw.close(grace=5)
    assert done == [0, 1, 3, 4]
    assert all(n.startswith("fleetmedic-paperwork") for n in where)


def test_close_waits_a_bounded_time_and_later_posts_run_inline():
    release = threading.Event()
    ran: list[str] = []
    pw = Paperwork()
    pw.post(lambda: (release.wait(5), ran.append("slow")))
    pw.close(grace=0.1)  # gives up waiting; the slow one is still under way
    assert ran == []
    pw.post(lambda: ran.append("after close"))  # nothing is dropped
    assert ran == ["after close"]
    release.set()

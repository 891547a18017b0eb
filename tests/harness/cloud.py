"""The replace rung's cloud in tests: moto's server mode (EC2 and Auto Scaling over real
HTTP on loopback), the only stand-in for AWS. The controller's playbook reaches it through
amazon.aws with ``endpoint_url``; the tests look at it through boto3.

    with MotoServer(workdir) as cloud:
        group = cloud.auto_scaling_group("gpu-pool", desired=2)
        cloud.group(group.name)  # instances, lifecycle states, desired capacity
"""

from __future__ import annotations

import dataclasses
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3

from tests.harness import procs

REGION, ZONE = "us-east-1", "us-east-1a"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
"""moto takes any; these keep boto3 (and amazon.aws) from looking for real ones."""


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    desired: int
    instances: dict[str, str]  # instance id -> lifecycle state

    def provider_id(self, instance: str) -> str:
        return f"aws:///{ZONE}/{instance}"


class MotoServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = procs.free_port()
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        server = Path(sys.executable).parent / "moto_server"
        log = self.workdir / "moto.log"
        self.proc = procs.spawn([str(server), "-H", "127.0.0.1", "-p", str(self.port)], log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {procs.last_line(log)}")
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto_server not answering on {self.url} after {timeout:.0f}s")

    def stop(self) -> None:
        procs.stop(self.proc)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def auto_scaling_group(self, name: str, desired: int) -> Group:
        """A launch template and a group of ``desired`` instances launched from it."""
        ec2, asg = self.client("ec2"), self.client("autoscaling")
        ami = ec2.describe_images()["Images"][0]["ImageId"]
        ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": ami, "InstanceType": "p5.48xlarge"},
        )
        asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": name},
            MinSize=0,
            MaxSize=desired + 2,
            DesiredCapacity=desired,
            AvailabilityZones=[ZONE],
        )
        return self.group(name)

    def group(self, name: str) -> Group:
        [g] = self.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
            "AutoScalingGroups"
        ]
        states = {i["InstanceId"]: i["LifecycleState"] for i in g["Instances"]}
        return Group(name, g["DesiredCapacity"], states)

    def instance_state(self, instance: str) -> str:
        [r] = self.client("ec2").describe_instances(InstanceIds=[instance])["Reservations"]
        return r["Instances"][0]["State"]["Name"]

    def terminated(self, instances: list[str]) -> list[str]:
        return [i for i in instances if self.instance_state(i) in ("shutting-down", "terminated")]

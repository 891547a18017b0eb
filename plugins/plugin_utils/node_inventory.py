# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""What the collection's node inventory plugins (k8s_nodes, slurm_nodes) share: the file
name check, the one-line error when the fleetmedic package is missing, the node list's
cache, and path options read relative to the inventory file."""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible_collections.fleetmedic.fleet.plugins.module_utils.text import one_line


class NodeInventory(BaseInventoryPlugin, Constructable, Cacheable):
    """A base for plugins that list a cluster's nodes. A subclass sets ``NAME`` and
    ``SUFFIX`` (``k8s_nodes``) and calls :meth:`_start` then :meth:`_nodes` in ``parse``."""

    SUFFIX = ""

    def verify_file(self, path):
        """Accept only readable files named *.<SUFFIX>.yml or *.<SUFFIX>.yaml."""
        endings = (".%s.yml" % self.SUFFIX, ".%s.yaml" % self.SUFFIX)
        if super().verify_file(path) and path.endswith(endings):
            return True
        self.display.debug(
            "%s inventory filename must end with '%s' or '%s'" % ((self.SUFFIX,) + endings)
        )
        return False

    def _start(self, inventory, loader, path, cache, import_error):
        """Read the inventory file; ``import_error`` (the fleetmedic package could not be
        imported) is one line naming the Python that runs Ansible."""
        BaseInventoryPlugin.parse(self, inventory, loader, path, cache)
        self._read_config_data(path)
        if import_error is not None:
            raise AnsibleError(
                "The %s inventory plugin needs the fleetmedic Python package in the Python "
                "that runs Ansible (%s): %s" % (self.NAME, sys.executable, one_line(import_error))
            )

    def _nodes(self, path, cache, fetch):
        """The node list: from the inventory cache when enabled and fresh, else ``fetch()``
        (stored in the cache when enabled)."""
        cache_key = self.get_cache_key(path)
        enabled = self.get_option("cache")
        update_cache = enabled and not cache
        if enabled and cache:
            try:
                return self._cache[cache_key]
            except KeyError:
                update_cache = True
        nodes = fetch()
        if update_cache:
            self._cache[cache_key] = nodes
        return nodes

    def _templated(self, option):
        """An option's value, templated when it is a template; None when empty."""
        value = self.get_option(option)
        if isinstance(value, str) and self.templar.is_template(value):
            value = self.templar.template(value)
        return value or None

    def _path_option(self, option, path):
        """A file option with ``~`` expanded, relative to the inventory file ``path``."""
        value = self._templated(option)
        if not value:
            return None
        value = os.path.expanduser(str(value))
        if not os.path.isabs(value):
            value = os.path.join(os.path.dirname(os.path.abspath(path)), value)
        return value

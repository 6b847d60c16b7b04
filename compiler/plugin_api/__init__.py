"""The plugin layer of UG1414: the Plugin interface, partition helpers, loader and driver."""

from compiler.plugin_api.base import Plugin
from compiler.plugin_api.helpers import (
    filter,
    filter_by_name,
    filter_by_template,
    filter_by_type,
    is_assigned,
    member_runs,
    merge_subgraph,
    root_children,
    unassigned_children,
)
from compiler.plugin_api.loader import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    load_plugin,
    load_plugins,
    plugin_names,
)
from compiler.plugin_api.manager import PluginRecord, partition_graph, run_plugin

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Plugin",
    "PluginRecord",
    "filter",
    "filter_by_name",
    "filter_by_template",
    "filter_by_type",
    "is_assigned",
    "load_plugin",
    "load_plugins",
    "member_runs",
    "merge_subgraph",
    "partition_graph",
    "plugin_names",
    "root_children",
    "run_plugin",
    "unassigned_children",
]

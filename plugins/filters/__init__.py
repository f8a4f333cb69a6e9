"""The default ``rmqk_filter_message``: re-filter by exact tag.

The broker filters by the tags' hash codes only, so two tags with the same Java
``hashCode`` both pass it; this plugin keeps only messages whose tag is one of
the subscription's, as Java's PullAPIWrapper.processPullResult does.
"""

from __future__ import annotations

from rmqk.contexts import FilterMessageContext
from rmqk.engine.consumer import TAGS_ONLY_FILTER
from rmqk.hookspecs import hookimpl
from rmqk.model import ExpressionType


@hookimpl(tryfirst=True)
def rmqk_filter_message(context: FilterMessageContext) -> None:
    sub = context.subscription
    if sub is None or sub.expression_type is not ExpressionType.TAG or sub.class_filter_mode:
        return
    if not sub.tags_set:
        return
    tags = sub.tags_set
    context.messages[:] = [m for m in context.messages if m.tags in tags]


# Nothing to narrow for a subscription to every tag: the consumer skips the hook call.
setattr(rmqk_filter_message, TAGS_ONLY_FILTER, True)

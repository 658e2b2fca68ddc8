"""Alerts: the Prefect server posts to a webhook when a pipeline run fails.

`deepsummit up` keeps one automation, `deepsummit-failed-runs`: when a flow run of `summit`
(train, tune) or `summit-trial` enters Failed or Crashed, it sends a notification through the
Custom Webhook block `deepsummit-alerts`, a JSON POST `{"text": subject + body}` with the run's
name, its state message and a link to the run in the UI. Slack incoming webhooks, Mattermost and
Google Chat read `text` as it is. The stage flows that `deepsummit ingest|weather|…` runs by
hand are left out: a person is watching them fail in a terminal.

The webhook URL is `alerts.webhook_url` (a secret for Slack: it is kept in the block's secret
values, never printed). Without one, `up` removes both, so a URL taken out of the config stops
the alerts.
"""

from __future__ import annotations

import urllib.error
from urllib.parse import urlsplit

from deepsummit.core.config import Settings
from deepsummit.services.prefect_api import PrefectApi

AUTOMATION_NAME = "deepsummit-failed-runs"
BLOCK_NAME = "deepsummit-alerts"
ALERTED_FLOWS = ("summit", "summit-trial")
ALERTED_EVENTS = ("prefect.flow-run.Failed", "prefect.flow-run.Crashed")
# Jinja templates the server renders with the run, its flow and the triggering event.
SUBJECT = "DeepSummit: {{ flow.name }} run {{ flow_run.name }} {{ flow_run.state.name }}"
BODY = (
    "Flow run {{ flow_run.name }} of {{ flow.name }} entered {{ flow_run.state.name }}:"
    " {{ flow_run.state.message }}\n{{ flow_run|ui_url }}"
)


def apply(settings: Settings, api: PrefectApi) -> str:
    """Create or update the automation and its webhook block when `alerts.webhook_url` is set,
    remove both when it is not; the line `deepsummit up` prints."""
    # Prefect's client is imported here: `deepsummit status` imports this module and stays quick.
    from prefect.automations import AutomationCore, EventTrigger, Posture, SendNotification
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    webhook_url = settings.alerts.webhook_url
    updates = {PREFECT_API_URL: api.url, PREFECT_API_AUTH_STRING: api.auth_string}
    with temporary_settings(updates), get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(AUTOMATION_NAME)
        if webhook_url is None:
            for automation in existing:
                client.delete_automation(automation.id)
            try:
                block = client.read_block_document_by_name(
                    BLOCK_NAME, CustomWebhookNotificationBlock.get_block_type_slug()
                )
            except ObjectNotFound:
                pass
            else:
                client.delete_block_document(block.id)
            return "alerts: off (no alerts.webhook_url)" + (
                f"; removed the automation {AUTOMATION_NAME}" if existing else ""
            )
        block_id = CustomWebhookNotificationBlock(
            name=BLOCK_NAME,
            url="{{ webhook_url }}",  # filled from the secret values when a notification is sent
            secrets={"webhook_url": webhook_url},
            json_data={"text": "{{ subject }}\n{{ body }}"},
        ).save(BLOCK_NAME, overwrite=True)
        automation = AutomationCore(
            name=AUTOMATION_NAME,
            description=f"Kept by `deepsummit up`: {describe_rule()}.",
            trigger=EventTrigger(
                expect=set(ALERTED_EVENTS),
                match={"prefect.resource.id": "prefect.flow-run.*"},
                match_related={
                    "prefect.resource.role": "flow",
                    "prefect.resource.name": list(ALERTED_FLOWS),
                },
                posture=Posture.Reactive,
                threshold=1,
            ),
            actions=[SendNotification(block_document_id=block_id, subject=SUBJECT, body=BODY)],
        )
        # Update in place, so the automation keeps its id (and its history in the UI).
        if existing:
            client.update_automation(existing[0].id, automation)
            for duplicate in existing[1:]:
                client.delete_automation(duplicate.id)
        else:
            client.create_automation(automation)
    return f"alerts: {describe_rule()} -> {shown_url(webhook_url)}"


def describe(settings: Settings, api: PrefectApi) -> str:
    """Whether alerts are on, as `deepsummit status` says it (the server is asked when it runs)."""
    webhook_url = settings.alerts.webhook_url
    if webhook_url is None:
        return "off: set alerts.webhook_url (DEEPSUMMIT_ALERTS__WEBHOOK_URL) and `deepsummit up`"
    try:
        found = api.post(
            "/automations/filter", {"automations": {"name": {"any_": [AUTOMATION_NAME]}}}
        )
    except (urllib.error.URLError, OSError, ValueError):
        return f"set ({shown_url(webhook_url)}); `deepsummit up` applies it"
    if not any(automation["enabled"] for automation in found):
        return f"set ({shown_url(webhook_url)}) but not applied: `deepsummit up`"
    return f"on: {describe_rule()} -> {shown_url(webhook_url)} (automation {AUTOMATION_NAME})"


def describe_rule() -> str:
    return f"Failed/Crashed runs of {', '.join(ALERTED_FLOWS)}"


def shown_url(url: str) -> str:
    """The webhook's scheme and host only: a Slack webhook's path is its secret."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"

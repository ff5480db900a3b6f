"""Every call is bound to a tenant and actor; transport headers count only when trusted."""

from __future__ import annotations

import pytest

from sagafleet.gateway import BindingPolicy, BindingRefused, CallerBinding


def test_stdio_call_acts_as_the_configured_tenant_and_actor():
    # given a server configured for acme as planner
    policy = BindingPolicy(tenant="acme", actor="planner")
    # when a call arrives without headers (stdio)
    # then it is bound to the configuration
    assert policy.bind(None) == CallerBinding("acme", "planner")


def test_untrusted_header_asking_for_another_tenant_is_refused():
    # given a server that does not trust headers
    policy = BindingPolicy(tenant="acme", actor="planner")
    # when a request asks for another tenant, then it is refused, not silently rebound
    with pytest.raises(BindingRefused, match="beta"):
        policy.bind({"X-Sagafleet-Tenant": "beta"})
    # and an untrusted actor header is ignored
    assert policy.bind({"X-Sagafleet-Actor": "mallory"}) == CallerBinding("acme", "planner")


def test_trusted_headers_choose_tenant_and_actor_and_fall_back_to_configuration():
    # given a server behind an authenticating proxy
    policy = BindingPolicy(tenant="acme", actor="planner", trust_headers=True)
    # when headers name tenant and actor (any case), then they bind the call
    assert policy.bind({"x-sagafleet-tenant": "beta", "X-SAGAFLEET-ACTOR": "bot-7"}) == \
        CallerBinding("beta", "bot-7")
    # and missing headers fall back to the configuration
    assert policy.bind({}) == CallerBinding("acme", "planner")


@pytest.mark.parametrize("bad", ["", " acme", "a" * 129, "acme\nadmin", "ten ant"])
def test_malformed_identities_are_refused(bad):
    # given trusted headers, when one names a malformed tenant, then it is refused
    policy = BindingPolicy(tenant="acme", actor="planner", trust_headers=True)
    with pytest.raises(BindingRefused):
        policy.bind({"X-Sagafleet-Tenant": bad} if bad else {"X-Sagafleet-Tenant": "\t"})
    # and a server cannot be configured with one either
    with pytest.raises(BindingRefused):
        BindingPolicy(tenant=bad, actor="planner")

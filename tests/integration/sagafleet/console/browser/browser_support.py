"""What every browser scenario does: sign in with a token, wait for the page, sign out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import (
    ElementNotInteractableException,
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 60.0
"""How long a scenario waits for the page to show something (bounds a hang; nothing is
asserted about how long it took)."""


def sign_in(driver: Any, world: Any, name: str, *, next_path: str = "/queue") -> None:
    """Sign in as ``name`` through the sign-in form, with its API token."""
    driver.delete_all_cookies()
    driver.get(world.url(f"/sign-in?next={next_path}"))
    field = driver.find_element(By.ID, "token")
    field.send_keys(world.tokens[name])
    field.submit()
    wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "header .principal"))
    who = driver.find_element(By.CSS_SELECTOR, "header .principal").text
    assert who.startswith(name), who


def sign_out(driver: Any) -> None:
    """Press the header's sign-out button."""
    driver.find_element(By.CSS_SELECTOR, "form[action='/sign-out'] button").click()
    wait_until(driver, lambda d: "/sign-in" in d.current_url)


def wait_until(driver: Any, condition: Callable[[Any], Any], timeout: float = WAIT_S) -> Any:
    """What ``condition`` returns once it is truthy (a TimeoutException otherwise). A live page
    replaces its fragments when the read models move, so an element found a moment ago may be
    gone, or not yet laid out (not interactable) while its fragment is swapped in: such a look
    is simply taken again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException,
        ElementNotInteractableException)).until(condition)


def refused(driver: Any, *, saying: str = "") -> str:
    """Wait for the page that says an action was not recorded; the reason it gives."""
    wait_until(driver, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Not recorded")
    reason = str(driver.find_element(By.CSS_SELECTOR, "p.notice.error").text)
    assert saying.lower() in reason.lower(), reason
    return reason


def csrf_of(driver: Any) -> str:
    """The signed-in session's CSRF token (the sign-out form carries it)."""
    field = driver.find_element(By.CSS_SELECTOR, "form[action='/sign-out'] input[name=csrf]")
    return str(field.get_attribute("value"))


def post_form(driver: Any, action: str, fields: dict[str, str]) -> None:
    """Post a form the page does not offer, as a person with the browser's devtools could:
    what the server then answers is the test (the session's own CSRF token is sent)."""
    driver.execute_script(
        "const form = document.createElement('form');"
        "form.method = 'post'; form.action = arguments[0];"
        "for (const [name, value] of Object.entries(arguments[1])) {"
        "  const input = document.createElement('input');"
        "  input.type = 'hidden'; input.name = name; input.value = value;"
        "  form.appendChild(input); }"
        "document.body.appendChild(form); form.submit();",
        action, {"csrf": csrf_of(driver), **fields})


def no_alert(driver: Any) -> bool:
    """Whether no JavaScript alert is open."""
    try:
        driver.switch_to.alert  # noqa: B018 - raises when there is none
    except NoAlertPresentException:
        return True
    return False

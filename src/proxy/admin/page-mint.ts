/**
 * @module The operators' page's form that mints keys (`POST <admin>/keys`; docs/operating.md, "Minting keys"): its
 * HTML and script, put into the page (page.ts) with the names of the limiter's signed plans. Shown only when a plan
 * is signed.
 */

/** The section: a plan of the signed ones, an account and an expiry (optional), and the key minted. */
export const MINT_SECTION = `<section id="mint-section" hidden>
    <h2>Mint a key</h2>
    <form id="mint" class="row" autocomplete="off">
      <label>Plan<select id="mint-plan"></select></label>
      <label>Account (optional)<input id="mint-account" size="16" spellcheck="false"></label>
      <label>Expires (optional)<input id="mint-expires" placeholder="2027-01-01 or 90d" size="16"></label>
      <button type="submit">Mint</button>
    </form>
    <p class="caption">New key (shown once; nothing is stored): <code id="minted"></code></p>
  </section>`;

/** The script: fills the plans and sends the form (an expiry like `2027-01-01` as `expires`, else as `for`). */
export const MINT_SCRIPT = `const SIGNED = __SIGNED_PLANS__;
if (SIGNED.length > 0) {
  $("mint-section").hidden = false;
  for (const p of SIGNED) $("mint-plan").append(el("option", { value: p }, p));
}
$("mint").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = { plan: $("mint-plan").value };
  const account = $("mint-account").value.trim();
  const expires = $("mint-expires").value.trim();
  if (account) body.account = account;
  // A date alone is its midnight UTC (the API's expires wants a time).
  if (expires) body[/^\\d{4}-/.test(expires) ? "expires" : "for"] = /^\\d{4}-\\d\\d-\\d\\d$/.test(expires) ? expires + "T00:00:00Z" : expires;
  try {
    const k = await call("keys", body);
    $("minted").textContent = k.key;
    say("Key minted for " + k.plan + (k.account ? " (" + k.account + ")" : "") + (k.expires ? ", expires " + new Date(k.expires).toLocaleString() : "") + ".", "ok");
  } catch (e) { $("minted").textContent = ""; say(e.message, "error"); }
});`;

/** {@link MINT_SCRIPT} for these signed plans' names (as JSON safe inside a script element). */
export function mintScript(signed: readonly string[]): string {
  return MINT_SCRIPT.replace("__SIGNED_PLANS__", JSON.stringify(signed).replace(/</g, "\\u003c"));
}

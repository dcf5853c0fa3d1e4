// What the server says about its plugins beside the definitions (list_installed_task_definitions'
// metadata): the ones that did not load, with their errors, and the ones only a server
// restart brings up to date. Shown above the submit form, so a plugin that is missing from
// the picker says why.

import { h } from "./dom.js";

export function pluginProblems(metadata) {
  const errors = Object.entries(metadata?.plugin_errors || {}).sort(([a], [b]) => a.localeCompare(b));
  const restarts = Object.entries(metadata?.restart_required || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!errors.length && !restarts.length) return null;
  return h("div", { class: "alert alert-error", role: "status", id: "plugin-problems" },
    errors.length ? h("strong", {}, "Plugins that did not load") : null,
    errors.length ? h("ul", {}, errors.map(([name, error]) =>
      h("li", { class: "plugin-error" }, h("code", {}, name), `: ${error}`))) : null,
    restarts.map(([, sentence]) => h("p", { class: "alert-text plugin-restart" }, sentence)));
}

/**
 * The `dice` settings section as the server receives it: the user's settings plus `trustedWorkspace`,
 * which only the client can know and which no settings file may override, less the extension's own settings.
 */

import * as vscode from "vscode";

export const SECTION = "dice";

/**
 * `dice.*` settings only the extension reads (how it starts the server and shows its messages). The server is never
 * sent them: one from an older dice-lsp would name each newer one "not a dice-lsp setting".
 */
export const EXTENSION_SETTINGS = [
    "interpreter",
    "serverArgs",
    "trace",
    "importStrategy",
    "logLevel",
    "showNotifications",
] as const;

/** The `dice` section for `scope`, as sent to the server (plain JSON, trust injected). */
export function serverSettings(scope: vscode.Uri | undefined): Record<string, unknown> {
    return withTrust(vscode.workspace.getConfiguration(undefined, scope).get<unknown>(SECTION));
}

/** `settings` less the extension's own, with `trustedWorkspace` set from the editor (whatever else the key held). */
export function withTrust(settings: unknown): Record<string, unknown> {
    const base = typeof settings === "object" && settings !== null ? (settings as Record<string, unknown>) : {};
    const own: readonly string[] = EXTENSION_SETTINGS;
    const server = Object.fromEntries(Object.entries(base).filter(([key]) => !own.includes(key)));
    return { ...server, trustedWorkspace: vscode.workspace.isTrusted };
}

/**
 * Answers to a `workspace/configuration` request, with trust injected into each item that asks for the `dice`
 * section. `items` are the request's items and `answers` what the editor answered, in the same order.
 */
export function injectTrust(items: readonly { section?: string }[], answers: readonly unknown[]): unknown[] {
    return answers.map((answer, i) => (items[i]?.section === SECTION ? withTrust(answer) : answer));
}

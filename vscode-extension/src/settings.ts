/**
 * The `dice` settings section as the server receives it: the user's settings plus `trustedWorkspace`,
 * which only the client can know and which no settings file may override.
 */

import * as vscode from "vscode";

export const SECTION = "dice";

/** The `dice` section for `scope`, as sent to the server (plain JSON, trust injected). */
export function serverSettings(scope: vscode.Uri | undefined): Record<string, unknown> {
    return withTrust(vscode.workspace.getConfiguration(undefined, scope).get<unknown>(SECTION));
}

/** `settings` with `trustedWorkspace` set from the editor; anything else under that key is replaced. */
export function withTrust(settings: unknown): Record<string, unknown> {
    const base = typeof settings === "object" && settings !== null ? (settings as Record<string, unknown>) : {};
    return { ...base, trustedWorkspace: vscode.workspace.isTrusted };
}

/**
 * Answers to a `workspace/configuration` request, with trust injected into each item that asks for the `dice`
 * section. `items` are the request's items and `answers` what the editor answered, in the same order.
 */
export function injectTrust(items: readonly { section?: string }[], answers: readonly unknown[]): unknown[] {
    return answers.map((answer, i) => (items[i]?.section === SECTION ? withTrust(answer) : answer));
}

/**
 * How the server process is started: `<python> -m dice_lsp <dice.serverArgs>`.
 * The interpreter is `dice.interpreter`, else the Python extension's selection, else `python3` from PATH.
 */

import * as vscode from "vscode";
import { PythonEnvironments, selectedInterpreter } from "./python";

export const FALLBACK_INTERPRETER = "python3";

export interface LaunchOptions {
    readonly command: string;
    readonly args: readonly string[];
    /** Where the interpreter came from, for the log: "dice.interpreter", "Python extension" or "fallback". */
    readonly source: string;
}

/** Settings whose change restarts the server (the others are re-read by the running server). */
export const LAUNCH_SETTINGS = ["dice.interpreter", "dice.serverArgs"] as const;

/** The workspace folder whose interpreter runs the server: one server serves the window. */
export function launchScope(): vscode.Uri | undefined {
    return vscode.workspace.workspaceFolders?.[0]?.uri;
}

export async function resolveLaunch(
    scope: vscode.Uri | undefined,
    environments: PythonEnvironments | undefined,
): Promise<LaunchOptions> {
    const config = vscode.workspace.getConfiguration("dice", scope);
    const args = ["-m", "dice_lsp", ...stringArray(config.get<unknown>("serverArgs"))];
    const configured = config.get<string>("interpreter")?.trim() ?? "";
    if (configured !== "") {
        return { command: configured, args, source: "dice.interpreter" };
    }
    // An untrusted workspace may select an interpreter inside itself (a .venv it ships); running that would run
    // the workspace's code, so only an interpreter from user settings or PATH is used until trust is granted.
    if (environments !== undefined && vscode.workspace.isTrusted) {
        const selected = await selectedInterpreter(environments, scope);
        if (selected !== undefined && selected !== "") {
            return { command: selected, args, source: "Python extension" };
        }
    }
    return { command: FALLBACK_INTERPRETER, args, source: "fallback" };
}

export function sameLaunch(a: LaunchOptions | undefined, b: LaunchOptions | undefined): boolean {
    return (
        a !== undefined &&
        b !== undefined &&
        a.command === b.command &&
        a.args.length === b.args.length &&
        a.args.every((arg, i) => arg === b.args[i])
    );
}

export function describeLaunch(launch: LaunchOptions): string {
    return [launch.command, ...launch.args].join(" ");
}

function stringArray(value: unknown): string[] {
    return Array.isArray(value) ? value.filter((item): item is string => typeof item === "string") : [];
}

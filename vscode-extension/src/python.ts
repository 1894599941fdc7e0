/**
 * The interpreter selected in the Python extension (ms-python.python), when that extension is installed.
 * Only the two calls dice needs are typed here, so the extension does not depend on the Python extension's package.
 */

import * as vscode from "vscode";

export const PYTHON_EXTENSION_ID = "ms-python.python";

interface EnvironmentPath {
    readonly id: string;
    readonly path: string;
}

interface ResolvedEnvironment {
    readonly executable: { readonly uri: vscode.Uri | undefined };
}

/** The part of the Python extension's exported API that dice uses (its `environments` namespace). */
export interface PythonEnvironments {
    getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
    resolveEnvironment(environment: EnvironmentPath | string): Promise<ResolvedEnvironment | undefined>;
    readonly onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}

/** The Python extension's environments API, activated; undefined when the extension is not installed. */
export async function pythonEnvironments(): Promise<PythonEnvironments | undefined> {
    const extension = vscode.extensions.getExtension<{ environments?: PythonEnvironments }>(PYTHON_EXTENSION_ID);
    if (extension === undefined) {
        return undefined;
    }
    const api = extension.isActive ? extension.exports : await extension.activate();
    return api?.environments;
}

/**
 * The executable of the environment selected for `resource`. The active path may name an environment's folder
 * (conda) rather than its interpreter, so it is resolved to an executable first.
 */
export async function selectedInterpreter(
    environments: PythonEnvironments,
    resource: vscode.Uri | undefined,
): Promise<string | undefined> {
    const active = environments.getActiveEnvironmentPath(resource);
    const resolved = await environments.resolveEnvironment(active);
    return resolved?.executable.uri?.fsPath;
}

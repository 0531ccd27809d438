// An exception in the init context: exit 107 before anything runs.
throw new Error('broken init');
export default function () {}
